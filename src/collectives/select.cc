#include "collectives/select.h"

#include <string>

#include "core/config.h"
#include "core/error.h"

namespace kolo::collectives {

const char* algo_name(AllreduceAlgo a) {
  switch (a) {
    case AllreduceAlgo::OneShot: return "oneshot";
    case AllreduceAlgo::Chunked: return "chunked";
    case AllreduceAlgo::Ring: return "ring";
    case AllreduceAlgo::Sharded: return "sharded";
  }
  return "?";
}

AllreduceAlgo select_allreduce(bool shm, std::size_t bytes, std::size_t oneshot_limit) {
  static const std::string forced = config::allreduce_algo();
  const AllreduceAlgo large = shm ? AllreduceAlgo::Chunked : AllreduceAlgo::Ring;
  if (forced == "auto") {
    const auto small = static_cast<std::size_t>(config::allreduce_small_bytes());
    return bytes <= small && bytes <= oneshot_limit ? AllreduceAlgo::OneShot : large;
  }
  if (forced == "oneshot") return bytes <= oneshot_limit ? AllreduceAlgo::OneShot : large;
  if (forced == algo_name(large)) return large;
  fail("KOLO_ALLREDUCE_ALGO={} is not an algorithm of the {} transport (auto, oneshot, {})",
       forced, shm ? "shm" : "tcp", algo_name(large));
}

AllreduceAlgo select_hier_allreduce(std::size_t bytes, std::size_t oneshot_limit) {
  static const std::string forced = config::allreduce_algo();
  const bool fits = bytes <= oneshot_limit;
  if (forced == "auto")
    return fits && bytes <= static_cast<std::size_t>(config::allreduce_small_bytes()) ? AllreduceAlgo::OneShot
                                                                                     : AllreduceAlgo::Sharded;
  if (forced == "oneshot") return fits ? AllreduceAlgo::OneShot : AllreduceAlgo::Sharded;
  if (forced == "sharded") return AllreduceAlgo::Sharded;
  fail("KOLO_ALLREDUCE_ALGO={} is not an algorithm of the hierarchical transport (auto, oneshot, sharded)",
       forced);
}

}  // namespace kolo::collectives
