// kolo_fault_rank: the rank program of the fault-injection tests. It runs a
// long allreduce loop (mixed sizes, 8 B to 4 MiB, results checked; every
// third iteration two asynchronous allreduces in flight) until kolo reports
// an error, and tells the driver (fault_test.sh) what it saw.
//
//   kolo_fault_rank DIR [--compute-ms MS] [--die-rank K --die-iter I] [--max-s S]
//
// Files in DIR (written under a temporary name and renamed):
//   rank.R.pid      this rank's pid, at start
//   kolorun.pid     rank 0's parent (kolorun), for the launcher-kill case
//   job_id          KOLO_JOB_ID (rank 0), to look for leftover shm segments
//   running.R       after the first completed iteration: the driver kills
//                   only once every rank is inside the loop
//
// --compute-ms: a "compute phase" (sleep) after every allreduce; with
// --die-rank/--die-iter, rank K kills itself (SIGKILL) in the middle of the
// compute phase of iteration I, so the others meet the dead rank only when
// they enter the next collective.
//
// SIGTERM only sets a flag: kolorun sends it to every survivor as soon as the
// first rank dies, and the point of the test is that kolo itself reports the
// dead rank to every survivor, so a survivor must not die of the teardown
// first. It keeps going until kolo's error arrives; 40 s after SIGTERM with
// no error it gives up and says so (exit 4), and kolorun's grace period
// (raised by the driver) ends anything that hangs inside a collective.
//
// Output (stderr, one report per rank, relayed by kolorun as "[R] ..."):
//   error-at <unix time in s>     when the error was caught
//   caught: <kolo error>          the error (may span several lines)
//   next: <kolo error>            what the next collective said (it must fail too)
// Exit codes: 3 after a kolo error, 4 no error after SIGTERM, 5 wrong result,
// 6 usage, 0 when the loop ran out of time (--max-s) with no failure.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kolo/kolo.h"

namespace {

std::atomic<bool> g_term{false};
std::atomic<long long> g_term_at_ms{0};

long long steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void on_term(int) {
  if (!g_term.exchange(true)) g_term_at_ms.store(steady_ms());
}

void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text << "\n";
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kolo_fault_rank DIR [--compute-ms MS] [--die-rank K --die-iter I] [--max-s S]\n");
    return 6;
  }
  const std::string dir = argv[1];
  long compute_ms = 0, die_rank = -1, die_iter = -1;
  double max_s = 120;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--compute-ms") compute_ms = std::atol(argv[i + 1]);
    else if (a == "--die-rank") die_rank = std::atol(argv[i + 1]);
    else if (a == "--die-iter") die_iter = std::atol(argv[i + 1]);
    else if (a == "--max-s") max_s = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 6;
    }
  }

  struct sigaction sa {};
  sa.sa_handler = on_term;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);

  const char* rank_env = std::getenv("KOLO_RANK");
  if (rank_env == nullptr) rank_env = std::getenv("RANK");  // started with torchrun-style variables
  const std::string r = rank_env ? rank_env : "0";
  write_file(dir + "/rank." + r + ".pid", std::to_string(getpid()));
  if (r == "0") {
    write_file(dir + "/kolorun.pid", std::to_string(getppid()));
    const char* job = std::getenv("KOLO_JOB_ID");
    write_file(dir + "/job_id", job ? job : "");
  }

  // Element counts of f32: 8 B, 1 KiB, 64 KiB (the small/large switch), 1 MiB, 4 MiB.
  const std::size_t sizes[] = {2, 256, 16 << 10, 256 << 10, 1 << 20, 3, 40000};
  std::vector<float> buf(1 << 20);
  float small[2];
  kolo::Communicator comm;
  const auto start = std::chrono::steady_clock::now();
  long iter = 0;
  try {
    comm = kolo::init();
    const int rank = comm.rank(), size = comm.size();
    const float expect = static_cast<float>(size * (size + 1) / 2);
    for (;; ++iter) {
      const std::size_t n = sizes[iter % (sizeof sizes / sizeof sizes[0])];
      std::fill(buf.begin(), buf.begin() + n, static_cast<float>(rank + 1));
      if (iter % 3 == 2) {
        // Asynchronous, two in flight: the engine's thread runs them, and
        // a failure fails the queued one too.
        small[0] = small[1] = static_cast<float>(rank + 1);
        kolo::Work w1 = comm.allreduce_async(buf.data(), buf.data(), n, kolo::DType::F32, kolo::Op::Sum);
        kolo::Work w2 = comm.allreduce_async(small, small, 2, kolo::DType::F32, kolo::Op::Sum);
        w1.wait();
        w2.wait();
        if (small[1] != expect) {
          std::fprintf(stderr, "wrong async result at iteration %ld: %g, expected %g\n", iter, small[1], expect);
          return 5;
        }
      } else {
        comm.allreduce(buf.data(), n, kolo::Op::Sum);
      }
      if (buf[0] != expect || buf[n - 1] != expect) {
        std::fprintf(stderr, "wrong result at iteration %ld: %g and %g, expected %g\n", iter, buf[0],
                     buf[n - 1], expect);
        return 5;
      }
      if (iter == 0) write_file(dir + "/running." + r, "1");
      if (compute_ms > 0) {
        if (rank == die_rank && iter == die_iter) {
          std::this_thread::sleep_for(std::chrono::milliseconds(compute_ms / 3));
          raise(SIGKILL);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(compute_ms));
      }
      if (g_term.load() && steady_ms() - g_term_at_ms.load() > 40000) {
        std::fprintf(stderr, "FAIL: still no kolo error 40 s after SIGTERM (iteration %ld)\n", iter);
        return 4;
      }
      if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(max_s)) {
        std::fprintf(stderr, "no failure within %g s (%ld iterations)\n", max_s, iter);
        return 0;
      }
    }
  } catch (const std::exception& e) {
    const double at = unix_seconds();
    // One write, so that the report's lines stay together.
    std::string report = "error-at " + std::to_string(at) + "\ncaught: " + e.what() + "\n";
    if (comm.valid()) {
      try {
        comm.allreduce(buf.data(), 2, kolo::Op::Sum);
        report += "next: no error\n";
      } catch (const std::exception& e2) {
        report += std::string("next: ") + e2.what() + "\n";
      }
    }
    std::fputs(report.c_str(), stderr);
    std::fflush(stderr);
    return 3;
  }
}
