#include <vector>

#include "collectives/backend.h"
#include "collectives/tcp/algorithms.h"
#include "kernels/reduce.h"
#include "timeline/recorder.h"

namespace kolo::collectives {

// Latency-optimal for small messages: one round in which every rank sends its
// whole input to every other rank; then each reduces all inputs in rank order
// (the same order everywhere, so the same bits everywhere).
void tcp_allreduce_oneshot(TcpMesh& m, Scratch& s, const void* in, void* out, std::size_t count,
                           DType t, Op kop, int divisor) {
  const int n = m.size(), r = m.rank();
  const std::size_t bytes = count * dtype_size(t);
  char* inbox = s.get(s.a, bytes * n);
  std::vector<transport::SendOp> sends;
  std::vector<transport::RecvOp> recvs;
  std::vector<const void*> srcs(n);
  for (int q = 0; q < n; ++q) {
    if (q == r) {
      srcs[q] = in;
      continue;
    }
    sends.push_back({q, static_cast<const char*>(in), bytes, bytes});
    recvs.push_back({q, inbox + q * bytes, bytes});
    srcs[q] = inbox + q * bytes;
  }
  m.exchange(sends, recvs, "allreduce (oneshot)");
  detail::timeline::timed_reduce(t, kop, out, srcs.data(), n, count, divisor);
}

}  // namespace kolo::collectives
