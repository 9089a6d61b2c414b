#include "collectives/hier/algorithms.h"
#include "collectives/select.h"

namespace kolo::collectives {

// The allreduce of the hierarchical backend, and the first half of its
// reduce-scatter: one-shot or sharded by size.
void hier_allreduce(Hier& h, const void* in, void* out, std::size_t count, DType t, Op op) {
  if (run_oneshot(Plane::Hier, count * dtype_size(t), h.local->chunk_bytes()))
    hier_allreduce_oneshot(h, in, out, count, t, op);
  else
    hier_allreduce_sharded(h, in, out, count, t, op);
}

}  // namespace kolo::collectives
