// Fashion-MNIST augmentation for the preprocessing cache (no LibTorch): a
// random shift and an elastic-style jitter (Simard et al. 2003: a random
// displacement field smoothed by a Gaussian), bilinear resampling, then the
// same normalisation as the trainer. Deliberately CPU-heavy per sample —
// the work a preprocessing cache exists to do once.
//
// Deterministic: sample `index` draws its randomness from a generator
// seeded by (seed, index) only, and the arithmetic is sequential, so every
// rank computes the same floats for it whatever the number of ranks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fmnist {

enum class Augment { None, Shift, Elastic };  // Elastic includes the shift

Augment parse_augment(const std::string& name);  // "none", "shift", "elastic"; throws otherwise
const char* augment_name(Augment a);

struct AugmentOptions {
  Augment kind = Augment::Elastic;
  int max_shift = 2;       // pixels, each direction
  double alpha = 1.5;      // displacement amplitude in pixels (elastic)
  double sigma = 4.0;      // Gaussian smoothing of the field in pixels (elastic)
  std::uint64_t seed = 42;
};

// rows×cols u8 pixels -> rows×cols normalised f32 ((p/255 - mean)/std).
std::vector<float> augment(const std::uint8_t* pixels, int rows, int cols, std::uint64_t index,
                           const AugmentOptions& o);

}  // namespace fmnist
