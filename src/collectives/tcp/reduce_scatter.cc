#include <cstring>
#include <vector>

#include "collectives/backend.h"
#include "collectives/tcp/algorithms.h"

namespace kolo::collectives {

void tcp_reduce_scatter(TcpMesh& m, Scratch& s, const void* in, void* out, std::size_t count,
                        DType t, Op op) {
  const int n = m.size(), r = m.rank();
  const std::size_t es = dtype_size(t), block = count * es;
  // The ring reduces in place, and the input is the caller's: work on a copy.
  char* work = s.get(s.a, block * n);
  std::memcpy(work, in, block * n);
  std::vector<std::size_t> offsets(n), counts(n, count);
  for (int q = 0; q < n; ++q) offsets[q] = q * count;
  ring_reduce_scatter(m, work, s.get(s.b, block), Blocks{offsets, counts}, t, kernel_op(op),
                      kernel_divisor(op, n));
  std::memcpy(out, work + r * block, block);
}

}  // namespace kolo::collectives
