// Which allreduce algorithm runs for a message: a small table of size ranges
// (UCC's style), overridable with KOLO_ALLREDUCE_ALGO.
//
//   plane  bytes <= KOLO_ALLREDUCE_SMALL (64 KiB)   larger
//   shm    oneshot (1 sync, all ranks reduce all)   chunked (reduce-scatter in place + copy-out, pipelined)
//   tcp    oneshot (each rank sends to all)          ring (reduce-scatter + allgather, segmented)
//   hier   oneshot (shm, leaders' exchange, shm)     sharded (shm reduce-scatter, rings across hosts, shm allgather)
#pragma once

#include <cstddef>

namespace kolo::collectives {

enum class AllreduceAlgo { OneShot, Chunked, Ring, Sharded };
enum class Plane { Shm, Tcp, Hier };

const char* algo_name(AllreduceAlgo a);
// `oneshot_limit`: the largest message the one-shot algorithm can carry on
// this plane (the shm slot size; unlimited on tcp).
AllreduceAlgo select_allreduce(Plane plane, std::size_t bytes, std::size_t oneshot_limit);
// select_allreduce, the choice named in the timeline's event of this call:
// true for the one-shot algorithm, false for the plane's bandwidth one.
bool run_oneshot(Plane plane, std::size_t bytes, std::size_t oneshot_limit);

}  // namespace kolo::collectives
