// Hierarchical collectives: ranks on several hosts, shared memory within a
// host, TCP only between hosts (Horovod's hierarchical allreduce). One file
// each; they compose the shm_* and tcp_* algorithms over sub-groups:
//
//   local   the ranks of this host: a ShmGroup of their own (prefix
//           <comm>/host<h>, its own segment in this host's /dev/shm).
//   cross   for local index i < `shards` (the smallest number of ranks any
//           host has), the ranks of local index i on every host: a TcpMesh
//           of H members (prefix <comm>/cross<i>), member h = host h. Cross
//           mesh 0 joins the hosts' leaders (local index 0).
//   flat    a TcpMesh of all ranks, built by the first alltoall(v) only.
//
// Unequal hosts (e.g. 2, 2, 1 ranks) work: the bandwidth-bound phases split
// the data into `shards` pieces owned by the first `shards` ranks of every
// host; the other ranks only take part within their host. Hosts are
// numbered by their lowest rank; every reduction happens in one fixed order
// (local rank order within a host, then a fixed order across hosts) at one
// place, and its result is copied, so every rank ends with the same bits.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collectives/shm/algorithms.h"
#include "collectives/tcp/algorithms.h"

namespace kolo::collectives {

struct Hier {
  int rank = 0, size = 0;              // in the job
  int host = 0, hosts = 0;             // this rank's host index, number of hosts
  int local_rank = 0, local_size = 0;  // within this host
  int shards = 0;                      // the smallest local size
  std::vector<std::vector<int>> host_ranks;  // ranks of each host, ascending
  bool host_major = false;  // ranks numbered host by host (host h's ranks follow host h-1's)
  std::unique_ptr<ShmGroup> local;
  std::unique_ptr<TcpMesh> cross;  // null when local_rank >= shards
  std::unique_ptr<TcpMesh> flat;   // built by the first alltoall(v), with make_flat
  std::function<std::unique_ptr<TcpMesh>()> make_flat;
  Scratch scratch;
  // While a pipelined allreduce runs its rings on a thread of their own, the
  // cross mesh must not watch the shm group (that thread waits for them).
  std::atomic<bool> pipelining{false};

  bool leader() const { return local_rank == 0; }
};

// Small messages, latency first: every host reduces on shared memory (one
// synchronisation), the leaders exchange their hosts' sums in one round and
// reduce them in host order, and each leader broadcasts to its host.
void hier_allreduce_oneshot(Hier& h, const void* in, void* out, std::size_t count, DType t, Op op);
// Large messages, bandwidth first: intra-host reduce-scatter into `shards`
// shards, concurrent rings across hosts on each shard (cross mesh i carries
// shard i), intra-host allgather. Each host's link carries 2(H-1)/H of the
// message in each direction.
void hier_allreduce_sharded(Hier& h, const void* in, void* out, std::size_t count, DType t, Op op);
// One of the two by size (collectives/select.h), named in the timeline.
void hier_allreduce(Hier& h, const void* in, void* out, std::size_t count, DType t, Op op);
void hier_broadcast(Hier& h, void* data, std::size_t count, DType t, int root);
void hier_allgatherv(Hier& h, const void* in, void* out, std::span<const std::size_t> counts, DType t);
void hier_reduce_scatter(Hier& h, const void* in, void* out, std::size_t count, DType t, Op op);
void hier_alltoallv(Hier& h, const void* in, void* out, const AlltoallvLayout& l, DType t);
void hier_barrier(Hier& h);

}  // namespace kolo::collectives
