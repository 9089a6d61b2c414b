#include <algorithm>
#include <cstring>

#include "collectives/shm/algorithms.h"

namespace kolo::collectives {

// The root streams the message through its slots one chunk per epoch; the
// others copy each chunk out after the epoch's synchronisation.
void shm_broadcast(ShmGroup& g, void* data, std::size_t count, DType t, int root) {
  const std::size_t bytes = count * dtype_size(t);
  const std::size_t cb = g.chunk_bytes();
  auto* p = static_cast<char*>(data);
  std::size_t off = 0;
  do {  // at least once: an empty broadcast still synchronises (and is checked)
    const std::size_t len = std::min(cb, bytes - off);
    const std::uint64_t e = g.next_epoch();
    if (g.rank() == root) std::memcpy(g.slot(root, e), p + off, len);
    g.publish(e);
    g.wait_all(e, "broadcast");
    if (g.rank() != root) std::memcpy(p + off, g.slot(root, e), len);
    off += len;
  } while (off < bytes);
}

}  // namespace kolo::collectives
