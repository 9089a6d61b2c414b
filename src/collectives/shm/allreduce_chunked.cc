#include <algorithm>
#include <cstring>

#include "collectives/backend.h"
#include "collectives/shm/algorithms.h"
#include "kernels/reduce.h"
#include "timeline/recorder.h"

namespace kolo::collectives {

// Software pipeline with one synchronisation per chunk. At epoch e a rank
//   1. copies chunk j of its input into its slot of epoch e,
//   2. publishes e and waits for everyone,
//   3. reduces piece `rank` of chunk j across all slots of epoch e, writing
//      the result over its own piece in its own slot (nobody else reads that
//      piece of that slot at epoch e), and
//   4. copies the reduced chunk j-1 out of everyone's slots of epoch e-1.
// Each piece is reduced by exactly one rank, so all ranks get the same bits.
void shm_allreduce_chunked(ShmGroup& g, const void* in, void* out, std::size_t count, DType t,
                           Op op) {
  const std::size_t es = dtype_size(t);
  const std::size_t per_chunk = g.chunk_bytes() / es;
  const std::size_t chunks = (count + per_chunk - 1) / per_chunk;
  const int n = g.size();
  const int r = g.rank();
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  const void** srcs = g.sources();

  for (std::size_t j = 0; j <= chunks; ++j) {
    const std::uint64_t e = g.next_epoch();
    if (j < chunks) {
      const std::size_t m = std::min(per_chunk, count - j * per_chunk);
      std::memcpy(g.slot(r, e), src + j * per_chunk * es, m * es);
    }
    g.publish(e);
    g.wait_all(e, "allreduce");
    if (j < chunks) {
      const std::size_t m = std::min(per_chunk, count - j * per_chunk);
      const std::size_t lo = piece_begin(m, n, r), hi = piece_begin(m, n, r + 1);
      for (int q = 0; q < n; ++q) srcs[q] = g.slot(q, e) + lo * es;
      detail::timeline::timed_reduce(t, kernel_op(op), g.slot(r, e) + lo * es, srcs, n, hi - lo,
                      kernel_divisor(op, n));
    }
    if (j > 0) {
      const std::size_t base = (j - 1) * per_chunk;
      const std::size_t m = std::min(per_chunk, count - base);
      for (int q = 0; q < n; ++q) {
        const std::size_t lo = piece_begin(m, n, q), hi = piece_begin(m, n, q + 1);
        std::memcpy(dst + (base + lo) * es, g.slot(q, e - 1) + lo * es, (hi - lo) * es);
      }
    }
  }
}

}  // namespace kolo::collectives
