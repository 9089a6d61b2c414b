#include <chrono>
#include <future>
#include <vector>

#include "collectives/backend.h"
#include "collectives/hier/algorithms.h"
#include "core/config.h"

namespace kolo::collectives {

namespace {

// Where shard i of a segment of `count` elements starting at `base` lies.
struct Shards {
  std::size_t begin, end;
  std::vector<std::size_t> offsets, counts, local_counts;
  Shards(std::size_t base, std::size_t count, int shards, int local_size)
      : begin(base), end(base + count), offsets(shards), counts(shards), local_counts(local_size, 0) {
    for (int i = 0; i < shards; ++i) {
      offsets[i] = base + piece_begin(count, shards, i);
      counts[i] = local_counts[i] = piece_begin(count, shards, i + 1) - piece_begin(count, shards, i);
    }
  }
};

}  // namespace

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
//
// Messages of several segments (KOLO_HIER_SEGMENT) are pipelined so that the
// link never waits for shared memory: a thread runs the ring of segment j
// while this one reduces segment j+1 and gathers segment j-1. The shared-
// memory steps keep one order on every rank of a host (RS0 RS1 AG0 RS2 AG1 …),
// whatever the timing, and the rings one order on every mesh.
void hier_allreduce_sharded(Hier& h, const void* in, void* out, std::size_t count, DType t, Op op) {
  const std::size_t es = dtype_size(t);
  const int l = h.local_rank;
  const std::size_t seg = std::max<std::size_t>(1, static_cast<std::size_t>(config::hier_segment_bytes()) / es);
  const std::size_t segments = std::max<std::size_t>(1, (count + seg - 1) / seg);
  auto* base = static_cast<char*>(out);
  auto shards_of = [&](std::size_t j) {
    const std::size_t at = j * seg;
    return Shards(at, std::min(seg, count - std::min(count, at)), h.shards, h.local_size);
  };
  auto reduce = [&](const Shards& s) {  // step 1; `in` and `out` share offsets
    shm_reduce_blocks(*h.local, in, out, s.offsets, s.counts, t, kernel_op(op), 0);
  };
  auto ring = [&h, base, es, l, t, op](const Shards& s) {  // step 2
    if (!h.cross) return;
    char* shard = base + s.offsets[l] * es;
    tcp_allreduce_ring(*h.cross, h.scratch, shard, shard, s.counts[l], t, kernel_op(op), kernel_divisor(op, h.size));
  };
  auto gather = [&](const Shards& s) {  // step 3: shard i is local rank i's block
    const std::size_t mine = l < h.shards ? s.offsets[l] : s.end;
    shm_allgatherv(*h.local, base + mine * es, base + s.begin * es, s.local_counts, t);
  };

  if (segments == 1) {
    const Shards s = shards_of(0);
    reduce(s);
    ring(s);
    gather(s);
    return;
  }

  // The ring thread uses the cross mesh only; this thread the shm group
  // only, and it watches the host's ranks while it waits for a ring (the
  // mesh's own watch is off: the group is not for two threads at once).
  std::future<void> pending;
  struct Guard {  // on an error here: stop the ring thread before the buffers go
    Hier& h;
    std::future<void>& f;
    ~Guard() {
      h.pipelining = false;
      if (f.valid() && f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
        if (h.cross) h.cross->abort();
        f.wait();
      }
    }
  } guard{h, pending};
  auto wait_ring = [&] {
    while (pending.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready)
      h.local->check_peers("allreduce (waiting for the link)");
    pending.get();  // rethrows the ring's error
  };
  h.pipelining = true;
  std::vector<Shards> s;
  for (std::size_t j = 0; j < segments; ++j) s.push_back(shards_of(j));
  reduce(s[0]);
  pending = std::async(std::launch::async, ring, std::cref(s[0]));
  for (std::size_t j = 1; j <= segments; ++j) {
    if (j < segments) reduce(s[j]);
    wait_ring();
    if (j < segments) pending = std::async(std::launch::async, ring, std::cref(s[j]));
    gather(s[j - 1]);
  }
}

}  // namespace kolo::collectives
