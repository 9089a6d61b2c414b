// The ring primitives shared by allreduce, reduce-scatter and allgather.
// Each step a rank sends one block to its right neighbour while receiving one
// from its left; received bytes are reduced segment by segment as they
// arrive, so reduction overlaps the transfer.
#include <algorithm>

#include "collectives/tcp/algorithms.h"
#include "core/config.h"
#include "kernels/reduce.h"
#include "timeline/recorder.h"

namespace kolo::collectives {

namespace {
int mod(int a, int n) { return ((a % n) + n) % n; }
}  // namespace

void ring_reduce_scatter(TcpMesh& m, char* work, char* recv, Blocks b, DType t, Op op,
                         int divisor) {
  const int n = m.size(), r = m.rank();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const std::size_t es = dtype_size(t);
  const std::size_t segment =
      std::max<std::size_t>(es, static_cast<std::size_t>(config::ring_segment_bytes()) / es * es);

  // Step s sends block r-s-1 and receives block r-s-2: after n-1 steps the
  // block completed last is block r.
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(r - s - 1, n), rb = mod(r - s - 2, n);
    const bool last = s == n - 2;
    char* acc = work + b.offsets[rb] * es;
    const std::size_t rbytes = b.counts[rb] * es;
    transport::SendOp send{right, work + b.offsets[sb] * es, b.counts[sb] * es,
                           b.counts[sb] * es};
    transport::RecvOp rcv{left, recv, rbytes};
    std::size_t reduced = 0;
    auto reduce_arrived = [&](std::span<transport::RecvOp> rv) {
      // Reduce whole segments as they land (and the tail once all is in).
      std::size_t ready = rv[0].done == rbytes ? rbytes : rv[0].done / segment * segment;
      if (ready <= reduced) return;
      const void* srcs[2] = {acc + reduced, recv + reduced};
      detail::timeline::timed_reduce(t, op, acc + reduced, srcs, 2, (ready - reduced) / es, last ? divisor : 0);
      reduced = ready;
    };
    m.exchange({&send, 1}, {&rcv, 1}, "reduce-scatter (ring)", reduce_arrived);
  }
}

void ring_allgather(TcpMesh& m, char* work, Blocks b, DType t) {
  const int n = m.size(), r = m.rank();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const std::size_t es = dtype_size(t);
  for (int s = 0; s < n - 1; ++s) {
    const int sb = mod(r - s, n), rb = mod(r - s - 1, n);
    transport::SendOp send{right, work + b.offsets[sb] * es, b.counts[sb] * es,
                           b.counts[sb] * es};
    transport::RecvOp rcv{left, work + b.offsets[rb] * es, b.counts[rb] * es};
    m.exchange({&send, 1}, {&rcv, 1}, "allgather (ring)");
  }
}

}  // namespace kolo::collectives
