// kolo_late_rank: a rank that is late to a large collective is slow, not lost.
//
//   kolo_late_rank LATE_RANK LATE_MS MIB
//
// After one warm-up allreduce (the connections are up), rank LATE_RANK sleeps
// LATE_MS (a checkpoint, an evaluation) while the others enter an allreduce of
// MIB MiB and a broadcast of the same size from rank 0: their data fills the
// late rank's socket buffers and its window stays closed for the whole sleep.
// Run with KOLO_PEER_TIMEOUT_MS well below LATE_MS and KOLO_TIMEOUT_MS above
// it, every rank must finish with the right results (a live peer's closed
// window once aborted the connection after KOLO_PEER_TIMEOUT_MS: "lost
// connection ... Connection timed out"). Prints "late_rank: ok" per rank;
// exits 1 on a kolo error, 5 on a wrong result.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "kolo/kolo.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: kolo_late_rank LATE_RANK LATE_MS MIB\n");
    return 6;
  }
  const int late = std::atoi(argv[1]);
  const long late_ms = std::atol(argv[2]);
  const std::size_t n = static_cast<std::size_t>(std::atol(argv[3])) << 18;  // f32 elements
  try {
    kolo::Communicator comm = kolo::init();
    const int rank = comm.rank(), size = comm.size();
    std::vector<float> buf(n, static_cast<float>(rank + 1));
    float warm[2] = {1, 1};
    comm.allreduce(warm, 2, kolo::Op::Sum);
    if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
    const auto t0 = std::chrono::steady_clock::now();
    comm.allreduce(buf.data(), n, kolo::Op::Sum);
    const float sum = static_cast<float>(size * (size + 1) / 2);
    for (std::size_t i = 0; i < n; i += 4099)
      if (buf[i] != sum) {
        std::fprintf(stderr, "rank %d: allreduce element %zu is %g, expected %g\n", rank, i, buf[i], sum);
        return 5;
      }
    std::vector<float> b(n, rank == 0 ? 7.0f : 0.0f);
    if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
    comm.broadcast(b.data(), n, 0);
    if (b[0] != 7.0f || b[n - 1] != 7.0f) {
      std::fprintf(stderr, "rank %d: broadcast gave %g and %g, expected 7\n", rank, b[0], b[n - 1]);
      return 5;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("late_rank: ok (rank %d of %d, %.1f s)\n", rank, size, s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
