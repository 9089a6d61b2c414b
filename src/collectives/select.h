// Which allreduce algorithm runs for a message: a small table of size ranges
// (UCC's style), overridable with KOLO_ALLREDUCE_ALGO.
//
//   transport  bytes <= KOLO_ALLREDUCE_SMALL (64 KiB)   larger
//   shm        oneshot (1 sync, all ranks reduce all)   chunked (reduce-scatter in place + copy-out, pipelined)
//   tcp        oneshot (each rank sends to all)          ring (reduce-scatter + allgather, segmented)
//   hier       oneshot (shm, leaders' exchange, shm)     sharded (shm reduce-scatter, rings across hosts, shm allgather)
#pragma once

#include <cstddef>

namespace kolo::collectives {

enum class AllreduceAlgo { OneShot, Chunked, Ring, Sharded };

const char* algo_name(AllreduceAlgo a);
// `oneshot_limit`: the largest message the one-shot algorithm can carry on
// this transport (the shm slot size; unlimited on tcp).
AllreduceAlgo select_allreduce(bool shm, std::size_t bytes, std::size_t oneshot_limit);
// Ranks on several hosts (hier/algorithms.h); the limit is the shm slot size.
AllreduceAlgo select_hier_allreduce(std::size_t bytes, std::size_t oneshot_limit);

}  // namespace kolo::collectives
