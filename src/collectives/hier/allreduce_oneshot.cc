#include <cstring>

#include "collectives/backend.h"
#include "collectives/hier/algorithms.h"

namespace kolo::collectives {

// Three steps, each the latency-optimal one of its transport: every rank of a
// host sums the host's inputs (shm one-shot, one synchronisation); the
// leaders send their host's sum to every other leader and each reduces the H
// sums in host order (TCP one-shot, one round); each leader broadcasts the
// result to its host. Ranks other than the leaders never touch the network.
void hier_allreduce_oneshot(Hier& h, const void* in, void* out, std::size_t count, DType t, Op op) {
  shm_allreduce_oneshot(*h.local, in, out, count, t, kernel_op(op));
  if (h.leader()) tcp_allreduce_oneshot(*h.cross, h.scratch, out, out, count, t, kernel_op(op),
                                        kernel_divisor(op, h.size));
  shm_broadcast(*h.local, out, count, t, 0);
}

}  // namespace kolo::collectives
