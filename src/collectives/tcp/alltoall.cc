#include <cstring>

#include "collectives/tcp/algorithms.h"

namespace kolo::collectives {

// Pairwise exchange: at step s every rank sends to r+s and receives from r-s,
// so each link carries one block at a time in each direction. An empty block
// still goes (as the call's fingerprint header alone).
void tcp_alltoallv(TcpMesh& m, const void* in, void* out, const AlltoallvLayout& l, DType t) {
  const int n = m.size(), r = m.rank();
  const std::size_t es = dtype_size(t);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  std::memcpy(dst + l.recv.offsets[r] * es, src + l.send.offsets[r] * es, l.send.counts[r] * es);
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    const std::size_t out_bytes = l.send.counts[to] * es;
    transport::SendOp send{to, src + l.send.offsets[to] * es, out_bytes, out_bytes};
    transport::RecvOp recv{from, dst + l.recv.offsets[from] * es, l.recv.counts[from] * es};
    m.exchange({&send, 1}, {&recv, 1}, "alltoall");
  }
}

}  // namespace kolo::collectives
