// kolo_early_exit: rank 0 returns from main right after kolo::init() while
// its peers are slower; under mpirun, torchrun-style variables and Slurm's
// rank 0 hosts the rendezvous store, so its exit must not cut them off.
//
//   kolo_early_exit MODE [HOLD_MS]
//
// MODE
//   init        the other ranks only finish init() and return: each prints
//               "early_exit rank R of N: init ok". Run with the other ranks
//               slowed inside init() (KOLO_TEST_STORE_WAIT_DELAY_MS) to hit the
//               window between their last store requests.
//   collective  the other ranks then allreduce with the rank that left: each
//               must get a kolo error (not a hang, not a result) and prints
//               "early_exit rank R: allreduce failed: <message>".
//   hold        the other ranks keep their communicator HOLD_MS after init()
//               (longer than rank 0 lingers, KOLO_STORE_LINGER_MS), then
//               return: rank 0 exits after its bound with a warning.
// Rank 0 prints "early_exit rank 0 of N: leaving". Exits 1 on an unexpected
// kolo error, 5 when a collective with the departed rank 0 succeeded.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "kolo/kolo.h"

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "init") != 0 && std::strcmp(mode, "collective") != 0 &&
      std::strcmp(mode, "hold") != 0) {
    std::fprintf(stderr, "usage: kolo_early_exit init|collective|hold [HOLD_MS]\n");
    return 6;
  }
  int rank = -1;
  try {
    kolo::Communicator comm = kolo::init();
    rank = comm.rank();
    if (rank == 0) {
      std::printf("early_exit rank 0 of %d: leaving\n", comm.size());
      return 0;
    }
    std::printf("early_exit rank %d of %d: init ok\n", rank, comm.size());
    std::fflush(stdout);
    if (std::strcmp(mode, "hold") == 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(argc > 2 ? std::atol(argv[2]) : 0));
    if (std::strcmp(mode, "collective") == 0) {
      float x = 1;
      try {
        comm.allreduce(&x, 1);
      } catch (const kolo::Error& e) {
        std::printf("early_exit rank %d: allreduce failed: %s\n", rank, e.what());
        return 0;
      }
      std::printf("early_exit rank %d: allreduce with the departed rank 0 returned %g\n", rank, x);
      return 5;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "early_exit rank %d: %s\n", rank, e.what());
    return 1;
  }
}
