#include "progress.h"

#include <fmt/format.h>

#include <algorithm>

namespace fmnist {

std::string thousands(double v) {
  std::string digits = fmt::format("{:.0f}", v);
  std::string out;
  const bool neg = !digits.empty() && digits[0] == '-';
  if (neg) digits.erase(0, 1);
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return neg ? "-" + out : out;
}

void ProgressBar::start(int epoch, int epochs, long total) {
  epoch_ = epoch;
  epochs_ = epochs;
  total_ = std::max(1L, total);
  last_ = {};
}

void ProgressBar::update(long done, double loss, double samples_per_s) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_ < std::chrono::milliseconds(250)) return;
  last_ = now;
  draw(done, loss, samples_per_s);
}

void ProgressBar::draw(long done, double loss, double samples_per_s) {
  constexpr int kWidth = 24;
  const double frac = std::clamp(static_cast<double>(done) / static_cast<double>(total_), 0.0, 1.0);
  const int filled = static_cast<int>(frac * kWidth + 0.5);
  std::string bar;
  for (int i = 0; i < kWidth; ++i) bar += i < filled ? "\u2588" : "\u2591";
  const std::string text =
      fmt::format("epoch {}/{} {} {:3.0f}% loss {:.3f}  {} samples/s", epoch_, epochs_, bar,
                  frac * 100, loss, thousands(samples_per_s));
  // Pad over a longer previous line (count characters, not UTF-8 bytes).
  const std::size_t width = text.size() - static_cast<std::size_t>(kWidth) * 2;
  const bool drawn = last_width_ > 0;
  const std::string pad(last_width_ > width ? last_width_ - width : 0, ' ');
  last_width_ = width;
  // No '\r' before the first draw: a line-tagging relay (kolorun) would
  // otherwise show an empty tagged line.
  std::fprintf(out_, "%s%s%s", drawn ? "\r" : "", text.c_str(), pad.c_str());
  std::fflush(out_);
}

void ProgressBar::finish(const std::string& line) {
  if (enabled_) {
    const std::string pad(last_width_ > line.size() ? last_width_ - line.size() : 0, ' ');
    std::fprintf(out_, "%s%s%s\n", last_width_ ? "\r" : "", line.c_str(), pad.c_str());
    last_width_ = 0;
  } else {
    std::fprintf(out_, "%s\n", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace fmnist
