#include <cstring>
#include <vector>

#include "collectives/backend.h"
#include "collectives/tcp/algorithms.h"

namespace kolo::collectives {

// Bandwidth-optimal: reduce-scatter then allgather around the ring; each rank
// sends and receives 2(n-1)/n of the message.
void tcp_allreduce_ring(TcpMesh& m, Scratch& s, const void* in, void* out, std::size_t count,
                        DType t, Op kop, int divisor) {
  const int n = m.size();
  const std::size_t es = dtype_size(t);
  if (in != out) std::memcpy(out, in, count * es);
  std::vector<std::size_t> offsets(n), counts(n);  // n entries per call, not per byte
  for (int i = 0; i < n; ++i) {
    offsets[i] = piece_begin(count, n, i);
    counts[i] = piece_begin(count, n, i + 1) - offsets[i];
  }
  Blocks b{offsets, counts};
  char* recv = s.get(s.a, (count / n + 1) * es);
  ring_reduce_scatter(m, static_cast<char*>(out), recv, b, t, kop, divisor);
  ring_allgather(m, static_cast<char*>(out), b, t);
}

}  // namespace kolo::collectives
