// kolo-bench: times kolo's collectives over a range of message sizes and
// checks every result (nccl-tests style). See README.md and --help.
//
//   kolorun -np 2 kolo-bench -c allreduce -b 8 -e 256M -f 2 -d f32 -o sum -n 20 -w 5
#include <cstdio>
#include <exception>

#include "kolo/kolo.h"
#include "options.h"
#include "report.h"
#include "runner.h"

using namespace kolo_bench;

int main(int argc, char** argv) {
  const ParseResult parsed = parse_options(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  const Options& o = *parsed.options;
  try {
    kolo::Communicator comm = kolo::init();
    // Every exit goes through a barrier after rank 0 has printed: a launcher
    // that stops the job when the first rank exits must not cut its output.
    if (o.root < 0 || o.root >= comm.size()) {
      if (comm.rank() == 0)
        std::fprintf(stderr, "kolo-bench: --root %d is not a rank (size %d)\n", o.root, comm.size());
      comm.barrier();
      return 2;
    }
    Report report(comm, o);
    bool ok = true;
    for (Coll c : o.colls) {
      report.begin(c);
      if (c == Coll::Barrier) {
        report.row(c, run_size(comm, o, c, 0));
      } else {
        for (std::size_t bytes : o.sizes) report.row(c, run_size(comm, o, c, bytes));
      }
      ok &= report.end(c);
    }
    comm.barrier();
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    // kolo's errors already name the rank.
    std::fprintf(stderr, "kolo-bench: %s\n", e.what());
    return 1;
  }
}
