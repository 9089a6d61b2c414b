#include "collectives/backend.h"
#include "collectives/shm/algorithms.h"
#include "kernels/reduce.h"
#include "timeline/recorder.h"

namespace kolo::collectives {

// Rank r reduces piece r of every rank's staged blocks straight into its output.
void shm_reduce_scatter(ShmGroup& g, const void* in, void* out, std::size_t count, DType t, Op op) {
  const std::size_t es = dtype_size(t);
  const int n = g.size(), r = g.rank();
  auto* dst = static_cast<char*>(out);
  const void** srcs = g.sources();
  shm_block_pieces(g, in, count, es, "reduce_scatter",
                   [&](std::uint64_t e, std::size_t at, std::size_t m, std::size_t piece) {
                     for (int q = 0; q < n; ++q) srcs[q] = g.slot(q, e) + r * piece * es;
                     detail::timeline::timed_reduce(t, kernel_op(op), dst + at * es, srcs, n, m,
                                     kernel_divisor(op, n));
                   });
}

}  // namespace kolo::collectives
