#include "collectives/shm/algorithms.h"

namespace kolo::collectives {

// Piece q of each rank's slot is bound for rank q: rank r copies piece r of
// rank q's slot into its output block q. Every rank steps through the longest
// block any rank sends (l.longest), so all take the same number of epochs
// whatever they send themselves.
void shm_alltoallv(ShmGroup& g, const void* in, void* out, const AlltoallvLayout& l, DType t) {
  const std::size_t es = dtype_size(t);
  const int n = g.size(), r = g.rank();
  auto* dst = static_cast<char*>(out);
  shm_block_pieces_v(g, in, l.send, l.longest, es, "alltoall",
                     [&](std::uint64_t e, std::size_t at, std::size_t piece) {
                       for (int q = 0; q < n; ++q)
                         if (at < l.recv.counts[q])
                           std::memcpy(dst + (l.recv.offsets[q] + at) * es, g.slot(q, e) + r * piece * es,
                                       std::min(piece, l.recv.counts[q] - at) * es);
                     });
}

}  // namespace kolo::collectives
