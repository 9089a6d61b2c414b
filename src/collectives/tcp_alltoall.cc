#include <cstring>

#include "collectives/tcp_algorithms.h"

namespace kolo::collectives {

// Pairwise exchange: at step s every rank sends to r+s and receives from r-s,
// so each link carries one block at a time in each direction.
void tcp_alltoall(TcpMesh& m, const void* in, void* out, std::size_t count, DType t) {
  const int n = m.size(), r = m.rank();
  const std::size_t block = count * dtype_size(t);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  std::memcpy(dst + r * block, src + r * block, block);
  for (int s = 1; s < n; ++s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    transport::SendOp send{to, src + to * block, block, block};
    transport::RecvOp recv{from, dst + from * block, block};
    m.exchange({&send, 1}, {&recv, 1}, "alltoall");
  }
}

}  // namespace kolo::collectives
