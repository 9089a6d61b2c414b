#include <vector>

#include "collectives/backend.h"
#include "collectives/hier_algorithms.h"

namespace kolo::collectives {

// Horovod's hierarchical allreduce, with shards for hosts of unequal size:
//   1. intra-host reduce-scatter (shared memory): the message is cut into
//      `shards` contiguous shards, and local rank i (i < shards) ends with
//      shard i summed over its host, in local rank order;
//   2. local rank i of every host runs a ring allreduce of shard i over cross
//      mesh i; the `shards` rings run at once, each on its own connections;
//   3. intra-host allgather (shared memory) of the reduced shards.
// A host's link carries 2(H-1)/H of the message each way, whatever the
// number of ranks per host (a flat ring: 2(P-1)/P through the busiest link,
// plus the traffic of co-located ranks). Every element is reduced at one
// place in one order, then copied: the same bits on every rank.
void hier_allreduce_sharded(Hier& h, const void* in, void* out, std::size_t count, DType t, Op op) {
  const std::size_t es = dtype_size(t);
  const int s = h.shards, l = h.local_rank;
  std::vector<std::size_t> offsets(s), counts(s), local_counts(h.local_size, 0);
  for (int i = 0; i < s; ++i) {
    offsets[i] = piece_begin(count, s, i);
    counts[i] = local_counts[i] = piece_begin(count, s, i + 1) - offsets[i];
  }
  shm_reduce_blocks(*h.local, in, out, offsets, counts, t, kernel_op(op), 0);
  auto* base = static_cast<char*>(out);
  if (h.cross) {
    char* shard = base + offsets[l] * es;
    tcp_allreduce_ring(*h.cross, h.scratch, shard, shard, counts[l], t, kernel_op(op),
                       kernel_divisor(op, h.size));
  }
  // Shard i is local rank i's block of the allgather (ranks >= shards add none).
  const std::size_t mine = l < s ? offsets[l] : count;
  shm_allgatherv(*h.local, base + mine * es, out, local_counts, t);
}

}  // namespace kolo::collectives
