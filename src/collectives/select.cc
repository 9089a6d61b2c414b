#include "collectives/select.h"

#include <string>

#include "core/config.h"
#include "core/error.h"
#include "timeline/recorder.h"

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

AllreduceAlgo select_allreduce(Plane plane, std::size_t bytes, std::size_t oneshot_limit) {
  static const std::string forced = config::allreduce_algo();
  const AllreduceAlgo large = plane == Plane::Shm   ? AllreduceAlgo::Chunked
                              : plane == Plane::Tcp ? AllreduceAlgo::Ring
                                                    : AllreduceAlgo::Sharded;
  const bool fits = bytes <= oneshot_limit;
  if (forced == "auto")
    return fits && bytes <= static_cast<std::size_t>(config::allreduce_small_bytes()) ? AllreduceAlgo::OneShot
                                                                                     : large;
  if (forced == "oneshot") return fits ? AllreduceAlgo::OneShot : large;
  if (forced == algo_name(large)) return large;
  fail("KOLO_ALLREDUCE_ALGO={} is not an algorithm of the {} transport (auto, oneshot, {})", forced,
       plane == Plane::Shm ? "shm" : plane == Plane::Tcp ? "tcp" : "hierarchical", algo_name(large));
}

bool run_oneshot(Plane plane, std::size_t bytes, std::size_t oneshot_limit) {
  const AllreduceAlgo a = select_allreduce(plane, bytes, oneshot_limit);
  detail::timeline::algorithm = algo_name(a);
  return a == AllreduceAlgo::OneShot;
}

}  // namespace kolo::collectives
