// kolo::torch::GradScaler — dynamic loss scaling for mixed precision
// (LibTorch's C++ API has none; this follows torch.cuda.amp.GradScaler).
// Included by kolo/torch.h.
//
//   kolo::torch::GradScaler scaler;                      // scale 65536, ×2 every 2000 good steps
//   opt.zero_grad();
//   scaler.scale(loss).backward();                       // gradients of loss × scale
//   scaler.unscale(opt);                                 // optional: synchronize(), then ÷ scale,
//   clip_grad_norm_(model->parameters(), 1.0);           //   so clipping sees true gradients
//   scaler.step(opt);                                    // skipped when any rank saw inf/NaN
//   scaler.update();                                     // back off, or grow after the interval
//
// Every rank takes the same decision: unscale() checks the averaged
// gradients for inf/NaN and agrees on the answer with one 4-byte allreduce
// (Max), so a rank never steps while another skips, and the scales stay
// equal. Its state (scale, good steps since the last change) goes into kolo
// checkpoints through TrainState::scaler.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace kolo::torch {

class DistributedOptimizer;

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;   // after growth_interval steps without inf/NaN
  double backoff_factor = 0.5;  // on a step with inf/NaN (which is skipped)
  std::int64_t growth_interval = 2000;
  bool enabled = true;  // false: scale() is the identity and step() always steps
};

struct GradScalerState {
  double scale = 65536.0;
  std::int64_t growth_tracker = 0;  // consecutive steps without inf/NaN
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss × scale (in the loss's dtype).
  ::torch::Tensor scale(const ::torch::Tensor& loss) const;
  // Collective. The optimizer's synchronize() (gradients averaged), then every
  // gradient ÷ scale, then one allreduce so that all ranks agree whether any
  // gradient on any rank is inf/NaN. Once per step; step() calls it if you
  // did not.
  void unscale(DistributedOptimizer& optimizer);
  // Collective (through unscale). Calls optimizer.step() unless inf/NaN was
  // found; returns whether it stepped.
  bool step(DistributedOptimizer& optimizer);
  // Adjusts the scale from this step's agreed result; ends the step.
  void update();

  double get_scale() const { return state_.scale; }
  bool found_inf() const { return found_inf_; }  // of the current/last step
  const GradScalerOptions& options() const { return o_; }
  GradScalerState state() const { return state_; }
  void set_state(const GradScalerState& s);

 private:
  GradScalerOptions o_;
  GradScalerState state_;
  bool unscaled_ = false;
  bool found_inf_ = false;
};

}  // namespace kolo::torch
