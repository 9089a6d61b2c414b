#include "augment.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace fmnist {

namespace {

constexpr float kMean = 0.2860f, kStd = 0.3530f;  // as the trainer normalises

// Uniform in [-1, 1) from the generator's bits (std::uniform_real_distribution
// is implementation-defined; this is not).
double uniform(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-52 - 1.0; }

// Separable Gaussian blur of a rows×cols field, edges clamped.
void blur(std::vector<double>& f, int rows, int cols, double sigma) {
  const int r = static_cast<int>(std::ceil(3 * sigma));
  std::vector<double> k(2 * r + 1);
  double sum = 0;
  for (int i = -r; i <= r; ++i) sum += k[i + r] = std::exp(-0.5 * i * i / (sigma * sigma));
  for (auto& v : k) v /= sum;
  std::vector<double> tmp(f.size());
  for (int y = 0; y < rows; ++y)
    for (int x = 0; x < cols; ++x) {
      double s = 0;
      for (int i = -r; i <= r; ++i) s += k[i + r] * f[y * cols + std::clamp(x + i, 0, cols - 1)];
      tmp[y * cols + x] = s;
    }
  for (int y = 0; y < rows; ++y)
    for (int x = 0; x < cols; ++x) {
      double s = 0;
      for (int i = -r; i <= r; ++i) s += k[i + r] * tmp[std::clamp(y + i, 0, rows - 1) * cols + x];
      f[y * cols + x] = s;
    }
}

}  // namespace

Augment parse_augment(const std::string& name) {
  if (name == "none") return Augment::None;
  if (name == "shift") return Augment::Shift;
  if (name == "elastic") return Augment::Elastic;
  throw std::runtime_error("unknown augmentation '" + name + "' (none, shift, elastic)");
}

const char* augment_name(Augment a) {
  switch (a) {
    case Augment::None: return "none";
    case Augment::Shift: return "shift";
    case Augment::Elastic: return "elastic";
  }
  return "?";
}

std::vector<float> augment(const std::uint8_t* pixels, int rows, int cols, std::uint64_t index,
                           const AugmentOptions& o) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  std::vector<float> out(n);
  auto at = [&](int y, int x) -> double {  // zero (background) outside the image
    return y < 0 || y >= rows || x < 0 || x >= cols ? 0.0 : pixels[y * cols + x] / 255.0;
  };
  if (o.kind == Augment::None) {
    for (std::size_t i = 0; i < n; ++i) out[i] = (pixels[i] / 255.0f - kMean) / kStd;
    return out;
  }
  std::seed_seq seq{static_cast<std::uint32_t>(o.seed), static_cast<std::uint32_t>(o.seed >> 32),
                    static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32)};
  std::mt19937_64 g(seq);
  const double dy = std::round(uniform(g) * (o.max_shift + 0.5)), dx = std::round(uniform(g) * (o.max_shift + 0.5));
  std::vector<double> fy(n, 0.0), fx(n, 0.0);
  if (o.kind == Augment::Elastic) {
    for (auto& v : fy) v = uniform(g);
    for (auto& v : fx) v = uniform(g);
    blur(fy, rows, cols, o.sigma);
    blur(fx, rows, cols, o.sigma);
    // A blurred uniform field is small: scale its largest value to alpha.
    double m = 1e-12;
    for (std::size_t i = 0; i < n; ++i) m = std::max({m, std::abs(fy[i]), std::abs(fx[i])});
    for (std::size_t i = 0; i < n; ++i) {
      fy[i] *= o.alpha / m;
      fx[i] *= o.alpha / m;
    }
  }
  // Output pixel (y, x) samples the input at (y - dy + fy, x - dx + fx), bilinearly.
  for (int y = 0; y < rows; ++y)
    for (int x = 0; x < cols; ++x) {
      const std::size_t i = static_cast<std::size_t>(y) * cols + x;
      const double sy = y - dy + fy[i], sx = x - dx + fx[i];
      const int y0 = static_cast<int>(std::floor(sy)), x0 = static_cast<int>(std::floor(sx));
      const double wy = sy - y0, wx = sx - x0;
      const double v = (1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x0 + 1)) +
                       wy * ((1 - wx) * at(y0 + 1, x0) + wx * at(y0 + 1, x0 + 1));
      out[i] = static_cast<float>((v - kMean) / kStd);
    }
  return out;
}

}  // namespace fmnist
