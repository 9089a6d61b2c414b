// Overlap::Auto: which of the two ways to communicate a step's buckets this
// job keeps — during backward (overlapped) or all in step() — decided from
// the job's own first steps. No LibTorch here.
#pragma once

#include <chrono>
#include <vector>

#include "kolo/kolo.h"

namespace kolo::torch::detail {

// The schedule, by step index s (0-based, counted at each step's end):
//   s < kWarmupSteps                 overlapped, not timed (allocations, caches);
//   the next 2 * trial_steps steps   overlapped and not, alternating: adjacent
//                                    steps see the same machine (timings here
//                                    drift by tens of percent within minutes);
//   afterwards                       the mode whose median step time on the
//                                    slowest rank (one allreduce Max of the
//                                    two medians) was lower; a tie overlaps.
// Every rank runs the same schedule and gets the same decision. A step's time
// runs from the previous step's end to its own: forward, backward, waiting,
// the update and whatever the caller does between steps.
class OverlapTrial {
 public:
  static constexpr int kWarmupSteps = 2;

  // decide: Auto's trial; otherwise the mode is fixed to `fixed`.
  OverlapTrial(bool decide, bool fixed, int trial_steps);

  // The mode of the step now running.
  bool overlapping() const { return overlapping_; }
  // Still trying both modes.
  bool deciding() const { return deciding_; }

  // At the end of every step, on every rank at the same step (collective
  // once, at the decision).
  void step_done(Communicator& comm);

 private:
  using Clock = std::chrono::steady_clock;
  bool deciding_;
  bool overlapping_;
  int trial_steps_;
  long step_ = 0;
  Clock::time_point last_end_ = Clock::now();
  std::vector<double> on_ms_, off_ms_;
};

}  // namespace kolo::torch::detail
