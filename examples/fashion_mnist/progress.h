// A one-line progress bar redrawn with '\r' (rank 0 only), throttled so that
// it costs nothing next to a training step.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace fmnist {

class ProgressBar {
 public:
  ProgressBar(bool enabled, std::FILE* out = stdout) : enabled_(enabled), out_(out) {}

  // Starts an epoch of `total` steps.
  void start(int epoch, int epochs, long total);
  // After each step: steps done this epoch, running loss, global samples per second.
  void update(long done, double loss, double samples_per_s);
  // Overwrites the bar with a final line for the epoch (and a newline).
  void finish(const std::string& line);

 private:
  void draw(long done, double loss, double samples_per_s);
  bool enabled_;
  std::FILE* out_;
  int epoch_ = 0, epochs_ = 0;
  long total_ = 0;
  std::chrono::steady_clock::time_point last_{};
  std::size_t last_width_ = 0;
};

// 12345.6 -> "12,346"
std::string thousands(double v);

}  // namespace fmnist
