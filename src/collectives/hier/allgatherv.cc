#include <cstring>
#include <vector>

#include "collectives/hier/algorithms.h"

namespace kolo::collectives {

// Works in "host-major" order (host 0's ranks' blocks, then host 1's, ...),
// which is the output's own order when ranks are numbered host by host (the
// usual case: kolorun -H, srun's block distribution); otherwise in scratch,
// permuted into rank order at the end.
//   1. intra-host allgatherv: every rank of a host has the host's blocks;
//   2. the leaders' ring allgather of whole host blocks across hosts;
//   3. each leader shares the other hosts' blocks with its host.
void hier_allgatherv(Hier& h, const void* in, void* out, std::span<const std::size_t> counts, DType t) {
  const std::size_t es = dtype_size(t);
  std::vector<std::size_t> host_off(h.hosts), host_cnt(h.hosts), local_counts;
  std::size_t total = 0;
  for (int g = 0; g < h.hosts; ++g) {
    host_off[g] = total;
    for (int q : h.host_ranks[g]) host_cnt[g] += counts[q];
    total += host_cnt[g];
  }
  for (int q : h.host_ranks[h.host]) local_counts.push_back(counts[q]);
  char* base = h.host_major ? static_cast<char*>(out) : h.scratch.get(h.scratch.b, total * es);

  char* mine = base + host_off[h.host] * es;
  shm_allgatherv(*h.local, in, mine, local_counts, t);
  if (h.leader()) ring_allgather(*h.cross, base, Blocks{host_off, host_cnt}, t);
  shm_broadcast(*h.local, base, host_off[h.host], t, 0);
  const std::size_t after = host_off[h.host] + host_cnt[h.host];
  shm_broadcast(*h.local, base + after * es, total - after, t, 0);

  if (h.host_major) return;
  std::vector<std::size_t> rank_off(h.size);
  for (int q = 1; q < h.size; ++q) rank_off[q] = rank_off[q - 1] + counts[q - 1];
  std::size_t at = 0;
  for (int g = 0; g < h.hosts; ++g)
    for (int q : h.host_ranks[g]) {
      std::memcpy(static_cast<char*>(out) + rank_off[q] * es, base + at * es, counts[q] * es);
      at += counts[q];
    }
}

}  // namespace kolo::collectives
