// GradScaler: dynamic loss scaling whose skip/grow decision every rank
// takes together.
//
// Why a collective although the averaged gradients are equal everywhere:
// the check must not depend on the reduction carrying an inf through (a
// 16-bit wire format, a gradient that is not communicated, a caller who
// touched .grad after synchronize()). Each rank checks its own unscaled
// gradients and the ranks allreduce one int with Max: one rank's inf makes
// every rank skip the step and back off by the same factor, so parameters
// and scales stay equal.
#include <fmt/format.h>
#include <torch/utils.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "common.h"

namespace kolo::torch {

GradScaler::GradScaler(GradScalerOptions options) : o_(options) {
  if (!(o_.init_scale > 0) || !std::isfinite(o_.init_scale))
    throw Error(fmt::format("kolo: GradScaler: init_scale must be a positive finite number, not {}",
                            o_.init_scale));
  if (!(o_.growth_factor > 1))
    throw Error(fmt::format("kolo: GradScaler: growth_factor must be > 1, not {}", o_.growth_factor));
  if (!(o_.backoff_factor > 0 && o_.backoff_factor < 1))
    throw Error(fmt::format("kolo: GradScaler: backoff_factor must be in (0, 1), not {}",
                            o_.backoff_factor));
  if (o_.growth_interval < 1)
    throw Error(fmt::format("kolo: GradScaler: growth_interval must be >= 1, not {}",
                            o_.growth_interval));
  state_.scale = o_.init_scale;
}

::torch::Tensor GradScaler::scale(const ::torch::Tensor& loss) const {
  if (!o_.enabled) return loss;
  return loss * state_.scale;
}

void GradScaler::unscale(DistributedOptimizer& optimizer) {
  auto& comm = optimizer.communicator();
  if (unscaled_)
    throw Error(detail::prefix(comm.rank()) +
                "GradScaler: unscale() was already called in this step (call update() after step())");
  optimizer.synchronize();
  unscaled_ = true;
  found_inf_ = false;
  if (!o_.enabled) return;
  ::torch::NoGradGuard no_grad;
  // The reciprocal in f32, as torch.cuda.amp does; scales are powers of two
  // unless configured otherwise, so this is exact.
  const float inv = static_cast<float>(1.0 / state_.scale);
  // max|g| is inf or NaN iff some element is (max propagates NaN). The
  // maxima stay on their device until one read per device: a read of each
  // gradient's would wait for the GPU once per parameter.
  std::map<std::string, std::vector<::torch::Tensor>> maxima;  // by device
  for (auto& group : optimizer.optimizer().param_groups())
    for (auto& p : group.params()) {
      auto& g = p.mutable_grad();
      if (!g.defined()) continue;
      g.mul_(inv);
      if (g.numel() > 0) maxima[g.device().str()].push_back(g.abs().max().to(::torch::kFloat64));
    }
  std::int32_t bad = 0;
  for (const auto& [device, m] : maxima)
    if (!::torch::stack(m).isfinite().all().item<bool>()) bad = 1;
  comm.allreduce(&bad, 1, Op::Max);
  found_inf_ = bad != 0;
}

bool GradScaler::step(DistributedOptimizer& optimizer) {
  if (!unscaled_) unscale(optimizer);
  if (found_inf_) {
    optimizer.skip_step();
    return false;
  }
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!unscaled_)
    throw Error("kolo: GradScaler: update() without unscale() or step() in this step: no "
                "inf/NaN check was made");
  unscaled_ = false;
  if (!o_.enabled) return;
  if (found_inf_) {
    state_.scale *= o_.backoff_factor;
    state_.growth_tracker = 0;
  } else if (++state_.growth_tracker == o_.growth_interval) {
    state_.scale *= o_.growth_factor;
    state_.growth_tracker = 0;
  }
}

void GradScaler::set_state(const GradScalerState& s) {
  if (!(s.scale > 0) || !std::isfinite(s.scale) || s.growth_tracker < 0)
    throw Error(fmt::format("kolo: GradScaler: invalid state (scale {}, growth tracker {})", s.scale,
                            s.growth_tracker));
  state_ = s;
  unscaled_ = found_inf_ = false;
}

}  // namespace kolo::torch
