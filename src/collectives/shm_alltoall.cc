#include <algorithm>
#include <cstring>

#include "collectives/shm_algorithms.h"

namespace kolo::collectives {

// Same slot layout as reduce_scatter: piece q of my slot is bound for rank q;
// rank r copies piece r of rank q's slot into its output block q.
void shm_alltoall(ShmGroup& g, const void* in, void* out, std::size_t count, DType t) {
  const std::size_t es = dtype_size(t);
  const int n = g.size();
  const int r = g.rank();
  const std::size_t piece = std::max<std::size_t>(1, g.chunk_bytes() / n / es);
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);

  for (std::size_t at = 0; at < count || at == 0; at += piece) {  // at least one step
    const std::size_t m = std::min(piece, count - at);
    const std::uint64_t e = g.next_epoch();
    char* mine = g.slot(r, e);
    for (int q = 0; q < n; ++q)
      std::memcpy(mine + q * piece * es, src + (q * count + at) * es, m * es);
    g.publish(e);
    g.wait_all(e, "alltoall");
    for (int q = 0; q < n; ++q)
      std::memcpy(dst + (q * count + at) * es, g.slot(q, e) + r * piece * es, m * es);
  }
}

}  // namespace kolo::collectives
