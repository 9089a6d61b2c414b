// A worker of the elastic tests (elastic_test.sh): trains nothing, but keeps
// the contract a trainer keeps. Each step allreduces a vector whose exact sum
// says who took part; after a collective fails, or when kolorun has published
// a newer generation (checked every --check steps, agreed through rank 0),
// it drops its communicator and forms the next one with kolo::init() — the
// re-formation in the same process that issue 22 asks of the C++ API. The
// step counter is the "committed state": after re-forming, every worker
// takes rank 0's, so a step is never counted twice nor skipped.
//
//   elastic_worker STEPS [--elements N] [--sleep-ms MS] [--check K] [--until-file F]
// --until-file: stop (exit 0) at a check once F exists (rank 0 looks).
// Prints "pid P worker ID" first, then per step
//   "step S gen G rank R size N sum X ok at T"   (T: wall clock, s since the epoch)
// and "recovering: <why>" before each re-formation. Exit 0 after STEPS steps;
// 3 when a sum is wrong.
#include <kolo/kolo.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct HostsUpdated {};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: elastic_worker STEPS [--elements N] [--sleep-ms MS] [--check K]\n");
    return 2;
  }
  const std::int64_t steps = std::atoll(argv[1]);
  std::size_t elements = 1 << 16;
  int sleep_ms = 20, check = 5;
  std::string until_file;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--elements") == 0) elements = std::strtoull(argv[i + 1], nullptr, 10);
    else if (std::strcmp(argv[i], "--sleep-ms") == 0) sleep_ms = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--check") == 0) check = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--until-file") == 0) until_file = argv[i + 1];
  }
  const char* id = std::getenv("KOLO_WORKER_ID");
  std::printf("pid %d worker %s\n", static_cast<int>(getpid()), id ? id : "-");

  kolo::Communicator comm = kolo::init();
  std::int64_t step = 0;
  std::vector<std::int64_t> v(elements);
  bool synced = false;
  while (step < steps) {
    try {
      if (!synced) {
        comm.broadcast(&step, 1, kolo::DType::I64, 0);  // the committed step: rank 0's
        synced = true;
      }
      const int r = comm.rank(), n = comm.size();
      // Element i of rank r: (step + 1) * (r + 1) + i, so the sum is
      // (step + 1) * n(n+1)/2 + n*i: exact in int64, and wrong if any rank
      // is missing, doubled or a step behind.
      for (std::size_t i = 0; i < elements; ++i) v[i] = (step + 1) * (r + 1) + static_cast<std::int64_t>(i);
      comm.allreduce(v.data(), v.data(), elements, kolo::DType::I64, kolo::Op::Sum);
      for (std::size_t i = 0; i < elements; ++i) {
        const std::int64_t want = (step + 1) * n * (n + 1) / 2 + static_cast<std::int64_t>(n) * static_cast<std::int64_t>(i);
        if (v[i] != want) {
          std::printf("step %lld gen %d rank %d size %d element %zu is %lld, want %lld WRONG\n",
                      static_cast<long long>(step), kolo::elastic::generation(comm), r, n, i,
                      static_cast<long long>(v[i]), static_cast<long long>(want));
          return 3;
        }
      }
      const double at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
      std::printf("step %lld gen %d rank %d size %d sum %lld ok at %.3f\n", static_cast<long long>(step),
                  kolo::elastic::generation(comm), r, n, static_cast<long long>(v[0]), at);
      ++step;
      if (check > 0 && step % check == 0 && step < steps) {
        // Every rank must leave (or stop) at the same step: rank 0 decides.
        std::int64_t flags = 0;
        if (r == 0) {
          flags |= kolo::elastic::latest_generation(comm) > kolo::elastic::generation(comm) ? 1 : 0;
          flags |= !until_file.empty() && access(until_file.c_str(), F_OK) == 0 ? 2 : 0;
        }
        comm.broadcast(&flags, 1, kolo::DType::I64, 0);
        if (flags & 2) break;  // out of the step loop
        if (flags & 1) throw HostsUpdated{};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    } catch (const HostsUpdated&) {
      std::printf("recovering: hosts updated\n");
      comm = kolo::Communicator();
      comm = kolo::init();
      synced = false;
    } catch (const kolo::Error& e) {
      if (!kolo::elastic::enabled()) throw;
      std::printf("recovering: %.200s\n", e.what());
      comm = kolo::Communicator();
      comm = kolo::init();
      synced = false;
    }
  }
  return 0;
}
