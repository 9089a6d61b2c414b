#include "collectives/hier/algorithms.h"

namespace kolo::collectives {

// Each host gathers (one shared-memory synchronisation), the leaders meet
// (one TCP round), each host is released (a second synchronisation).
void hier_barrier(Hier& h) {
  h.local->sync("barrier");
  if (h.leader()) tcp_barrier(*h.cross);
  h.local->sync("barrier");
}

}  // namespace kolo::collectives
