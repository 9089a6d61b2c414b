#include "overlap_trial.h"

#include <algorithm>

namespace kolo::torch::detail {

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
}  // namespace

OverlapTrial::OverlapTrial(bool decide, bool fixed, int trial_steps)
    : deciding_(decide), overlapping_(decide || fixed), trial_steps_(trial_steps) {}

void OverlapTrial::step_done(Communicator& comm) {
  if (!deciding_) return;  // decided (or never trying): nothing to time
  const auto now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - last_end_).count();
  last_end_ = now;
  const long s = step_++;
  if (s >= kWarmupSteps) (overlapping_ ? on_ms_ : off_ms_).push_back(ms);
  if (s + 1 < kWarmupSteps + 2L * trial_steps_) {
    // The next step: the first trial step overlaps, then they alternate.
    overlapping_ = s + 1 < kWarmupSteps || (s + 1 - kWarmupSteps) % 2 == 0;
    return;
  }
  double slowest[2] = {median(on_ms_), median(off_ms_)};
  comm.allreduce(slowest, 2, Op::Max);
  overlapping_ = slowest[0] <= slowest[1];
  deciding_ = false;
}

}  // namespace kolo::torch::detail
