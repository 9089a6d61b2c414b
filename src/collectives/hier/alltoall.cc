#include "collectives/hier/algorithms.h"

namespace kolo::collectives {

// Flat: every rank sends a distinct block to every other rank, so routing
// through the leaders would only add copies. The mesh of all ranks is built
// by the first alltoall(v) (all ranks reach it at the same position, the
// collectives being ordered), not at init, since most jobs never call one.
// A hierarchical barrier comes first: it carries this call's fingerprint
// through the host groups and leaders, so ranks that called something else
// get the mismatch error instead of waiting on a connection nobody serves.
void hier_alltoallv(Hier& h, const void* in, void* out, const AlltoallvLayout& l, DType t) {
  hier_barrier(h);
  if (!h.flat) h.flat = h.make_flat();
  tcp_alltoallv(*h.flat, in, out, l, t);
}

}  // namespace kolo::collectives
