// kolo::torch::Join — training with uneven inputs (DDP's Join, Horovod's
// hvd.join). Included by kolo/torch.h.
//
//   kolo::torch::Join join(opt);
//   for (auto& batch : my_batches) {          // ranks may have different numbers of batches
//     join.begin_step();                       // collective: counts the ranks still training
//     opt.zero_grad(); loss(batch).backward(); opt.step();
//   }
//   join.finish();                             // shadows the others' steps until all are done
//
// Protocol: every step starts with one 4-byte allreduce (Sum) of "I am still
// training": 1 from each training rank (begin_step), 0 from each rank in
// finish(). While the sum is > 0, a rank in finish() shadows that step: it
// contributes zero gradients to each of the step's bucket allreduces (and
// takes part in the buffer broadcasts of broadcast_buffers), then applies
// the same averaged gradients with its own optimizer — so its parameters
// and optimizer state stay identical to the training ranks'. Under a Join
// the buckets are summed and divided by the number of ranks that trained in
// that step (the right divisor: zeros are not samples). When the sum is 0
// every rank has finished and finish() returns on all of them.
//
// With a GradScaler (pass it to the Join, and use scaler.step()/update() in
// the loop), a shadow step also takes part in the scaler's inf/NaN check and
// skips or steps, backs off or grows, as the training ranks do.
//
// Not covered: collectives in the model's forward or backward (SyncBatchNorm)
// — a finished rank cannot shadow a forward it does not run — and
// backward_passes_per_step > 1 (one begin_step() per optimizer step, and a
// step must not be split across a rank that finishes).
#pragma once

#include <cstdint>

namespace kolo::torch {

class DistributedOptimizer;
class GradScaler;

class Join {
 public:
  explicit Join(DistributedOptimizer& optimizer, GradScaler* scaler = nullptr);
  ~Join();  // detaches from the optimizer (ordinary averaging again)
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // Collective: before each step's forward on a rank that still has data.
  // Returns the number of ranks that train in this step.
  int begin_step();
  // Collective: once this rank's data is exhausted. Returns the number of
  // other ranks' steps it shadowed.
  std::int64_t finish();

 private:
  DistributedOptimizer* opt_;
  GradScaler* scaler_;
  bool finished_ = false;
};

}  // namespace kolo::torch
