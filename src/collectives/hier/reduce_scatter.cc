#include <cstring>

#include "collectives/hier/algorithms.h"

namespace kolo::collectives {

// An allreduce of the whole input (hierarchical, chosen by size as for
// allreduce) into scratch, of which each rank keeps its block. It moves
// twice what a direct reduce-scatter would, but keeps every byte between
// hosts on the hierarchical path with one reduction order.
void hier_reduce_scatter(Hier& h, const void* in, void* out, std::size_t count, DType t, Op op) {
  const std::size_t es = dtype_size(t), total = count * h.size;
  char* all = h.scratch.get(h.scratch.b, total * es);
  hier_allreduce(h, in, all, total, t, op);
  std::memcpy(out, all + h.rank * count * es, count * es);
}

}  // namespace kolo::collectives
