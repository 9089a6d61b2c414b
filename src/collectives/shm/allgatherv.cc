#include <algorithm>
#include <cstring>

#include "collectives/shm/algorithms.h"

namespace kolo::collectives {

// Each epoch every rank puts the next chunk of its own block in its slot and
// copies the same chunk of every other rank's block out.
void shm_allgatherv(ShmGroup& g, const void* in, void* out, std::span<const std::size_t> counts,
                    DType t) {
  const std::size_t es = dtype_size(t);
  const std::size_t cb = g.chunk_bytes();
  const int n = g.size();
  const int r = g.rank();
  auto* dst = static_cast<char*>(out);
  const auto* src = static_cast<const char*>(in);

  std::size_t my_offset = 0, longest = 0;
  for (int q = 0; q < n; ++q) {
    if (q < r) my_offset += counts[q] * es;
    longest = std::max(longest, counts[q] * es);
  }
  if (src != dst + my_offset) std::memcpy(dst + my_offset, src, counts[r] * es);

  for (std::size_t off = 0; off < longest || off == 0; off += cb) {  // at least one step
    const std::uint64_t e = g.next_epoch();
    const std::size_t mine = counts[r] * es;
    if (off < mine) std::memcpy(g.slot(r, e), src + off, std::min(cb, mine - off));
    g.publish(e);
    g.wait_all(e, "allgather");
    std::size_t block = 0;
    for (int q = 0; q < n; ++q) {
      const std::size_t len = counts[q] * es;
      if (q != r && off < len) std::memcpy(dst + block + off, g.slot(q, e), std::min(cb, len - off));
      block += len;
    }
  }
}

}  // namespace kolo::collectives
