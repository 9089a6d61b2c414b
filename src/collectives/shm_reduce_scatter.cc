#include <algorithm>
#include <cstring>

#include "collectives/backend.h"
#include "collectives/shm_algorithms.h"
#include "kernels/reduce.h"

namespace kolo::collectives {

// Each epoch every rank puts the next piece of each of its n input blocks in
// its slot (piece q at offset q*piece); rank r then reduces piece r of all
// slots straight into its output.
void shm_reduce_scatter(ShmGroup& g, const void* in, void* out, std::size_t count, DType t, Op op) {
  const std::size_t es = dtype_size(t);
  const int n = g.size();
  const int r = g.rank();
  const std::size_t piece = std::max<std::size_t>(1, g.chunk_bytes() / n / es);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  const void** srcs = g.sources();

  for (std::size_t at = 0; at < count || at == 0; at += piece) {  // at least one step
    const std::size_t m = std::min(piece, count - at);
    const std::uint64_t e = g.next_epoch();
    char* mine = g.slot(r, e);
    for (int q = 0; q < n; ++q)
      std::memcpy(mine + q * piece * es, src + (q * count + at) * es, m * es);
    g.publish(e);
    g.wait_all(e, "reduce_scatter");
    for (int q = 0; q < n; ++q) srcs[q] = g.slot(q, e) + r * piece * es;
    kernels::reduce(t, kernel_op(op), dst + at * es, srcs, n, m, kernel_divisor(op, n));
  }
}

}  // namespace kolo::collectives
