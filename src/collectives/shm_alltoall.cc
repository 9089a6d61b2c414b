#include "collectives/shm_algorithms.h"

namespace kolo::collectives {

// Piece q of each rank's slot is bound for rank q: rank r copies piece r of
// rank q's slot into its output block q.
void shm_alltoall(ShmGroup& g, const void* in, void* out, std::size_t count, DType t) {
  const std::size_t es = dtype_size(t);
  const int n = g.size(), r = g.rank();
  auto* dst = static_cast<char*>(out);
  shm_block_pieces(g, in, count, es, "alltoall",
                   [&](std::uint64_t e, std::size_t at, std::size_t m, std::size_t piece) {
                     for (int q = 0; q < n; ++q)
                       std::memcpy(dst + (q * count + at) * es, g.slot(q, e) + r * piece * es, m * es);
                   });
}

}  // namespace kolo::collectives
