#include <vector>

#include "collectives/tcp/algorithms.h"

namespace kolo::collectives {

// Every rank tells every other rank it has arrived: one round, n-1 bytes out.
void tcp_barrier(TcpMesh& m) {
  const int n = m.size(), r = m.rank();
  static const char token = 1;
  std::vector<char> inbox(n);
  std::vector<transport::SendOp> sends;
  std::vector<transport::RecvOp> recvs;
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    sends.push_back({q, &token, 1, 1});
    recvs.push_back({q, &inbox[q], 1});
  }
  m.exchange(sends, recvs, "barrier");
}

}  // namespace kolo::collectives
