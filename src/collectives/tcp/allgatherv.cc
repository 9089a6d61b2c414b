#include <cstring>
#include <vector>

#include "collectives/tcp/algorithms.h"

namespace kolo::collectives {

void tcp_allgatherv(TcpMesh& m, const void* in, void* out, std::span<const std::size_t> counts,
                    DType t) {
  const int n = m.size(), r = m.rank();
  const std::size_t es = dtype_size(t);
  std::vector<std::size_t> offsets(n);
  for (int q = 1; q < n; ++q) offsets[q] = offsets[q - 1] + counts[q - 1];
  char* mine = static_cast<char*>(out) + offsets[r] * es;
  if (in != mine) std::memcpy(mine, in, counts[r] * es);
  ring_allgather(m, static_cast<char*>(out), Blocks{offsets, counts}, t);
}

}  // namespace kolo::collectives
