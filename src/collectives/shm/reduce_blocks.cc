#include "collectives/shm/algorithms.h"
#include "kernels/reduce.h"
#include "timeline/recorder.h"

namespace kolo::collectives {

// Every member stages a piece of every block each epoch; the block's owner
// reduces that piece across all slots straight into its output.
void shm_reduce_blocks(ShmGroup& g, const void* in, void* out, std::span<const std::size_t> offsets,
                       std::span<const std::size_t> counts, DType t, Op kop, int divisor) {
  const std::size_t es = dtype_size(t);
  const int n = g.size(), r = g.rank();
  const bool owner = static_cast<std::size_t>(r) < counts.size();
  auto* dst = static_cast<char*>(out);
  const void** srcs = g.sources();
  // Every member has the same counts, so the same longest block.
  const std::size_t longest = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
  shm_block_pieces_v(g, in, Blocks{offsets, counts}, longest, es, "reduce (intra-host)",
                     [&](std::uint64_t e, std::size_t at, std::size_t piece) {
                       if (!owner || at >= counts[r]) return;
                       for (int q = 0; q < n; ++q) srcs[q] = g.slot(q, e) + r * piece * es;
                       detail::timeline::timed_reduce(t, kop, dst + (offsets[r] + at) * es, srcs, n,
                                       std::min(piece, counts[r] - at), divisor);
                     });
}

}  // namespace kolo::collectives
