#include "collectives/tcp/algorithms.h"

namespace kolo::collectives {

// A pipelined chain from the root: each rank forwards bytes to the next as
// soon as they arrive, so a large message costs about one transfer time.
void tcp_broadcast(TcpMesh& m, void* data, std::size_t count, DType t, int root) {
  const int n = m.size(), r = m.rank();
  const int pos = (r - root + n) % n;
  const int prev = (r - 1 + n) % n, next = (r + 1) % n;
  const std::size_t bytes = count * dtype_size(t);
  auto* p = static_cast<char*>(data);
  const bool sends = pos < n - 1, receives = pos > 0;
  transport::SendOp send{next, p, bytes, receives ? 0 : bytes};
  transport::RecvOp recv{prev, p, bytes};
  m.exchange({&send, sends ? 1u : 0u}, {&recv, receives ? 1u : 0u}, "broadcast",
             [&](std::span<transport::RecvOp> rv) { send.avail = rv[0].done; });
}

}  // namespace kolo::collectives
