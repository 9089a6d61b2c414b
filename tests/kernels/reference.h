// Plain scalar references for the kernel tests, written independently of the
// kernels: 16-bit floats are decoded and rounded with double arithmetic
// (frexp/ldexp/nearbyint) instead of bit tricks, reductions are the obvious
// left-to-right loops.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/targets.h"
#include "kolo/kolo.h"

namespace kolo::ref {

// A binary floating format with 1 sign bit, kExp exponent bits, kMant
// fraction bits, stored in the low bits of a uint16_t.
struct Format {
  int exp_bits;
  int mant_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  std::uint32_t exp_ones() const { return (1u << exp_bits) - 1; }
};
inline constexpr Format kF16{5, 10};
inline constexpr Format kBF16{8, 7};

// Value of a 16-bit pattern as f32; NaNs come back quiet with their payload.
inline float decode(Format fmt, std::uint16_t h) {
  const bool neg = h >> 15;
  const std::uint32_t e = (h >> fmt.mant_bits) & fmt.exp_ones();
  const std::uint32_t m = h & ((1u << fmt.mant_bits) - 1);
  if (e == fmt.exp_ones()) {
    if (m == 0) return neg ? -INFINITY : INFINITY;
    const std::uint32_t bits = (neg ? 0x80000000u : 0u) | 0x7F800000u | 0x00400000u |
                               (m << (23 - fmt.mant_bits));
    return std::bit_cast<float>(bits);
  }
  double v = e == 0 ? std::ldexp(double(m), 1 - fmt.bias() - fmt.mant_bits)
                    : std::ldexp(double(m + (1u << fmt.mant_bits)),
                                 int(e) - fmt.bias() - fmt.mant_bits);
  return float(neg ? -v : v);
}

// f32 to the format, rounding to nearest, ties to even; overflow to Inf; NaN
// quiet with the top payload bits kept.
inline std::uint16_t encode(Format fmt, float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = std::uint16_t((u >> 31) << 15);
  const std::uint16_t inf = std::uint16_t(sign | (fmt.exp_ones() << fmt.mant_bits));
  if (std::isnan(f)) {
    return std::uint16_t(inf | (1u << (fmt.mant_bits - 1)) | ((u & 0x7FFFFFu) >> (23 - fmt.mant_bits)));
  }
  const double a = std::fabs(double(f));
  if (std::isinf(a)) return inf;
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int binade = std::max(e - 1, 1 - fmt.bias());
  const double quantum = std::ldexp(1.0, binade - fmt.mant_bits);
  const double v = std::nearbyint(a / quantum) * quantum;  // default mode: ties to even
  if (v >= std::ldexp(1.0, fmt.bias() + 1)) return inf;
  const double min_normal = std::ldexp(1.0, 1 - fmt.bias());
  if (v < min_normal) {
    return std::uint16_t(sign | std::uint32_t(v / std::ldexp(1.0, 1 - fmt.bias() - fmt.mant_bits)));
  }
  int e2;
  const double frac = std::frexp(v, &e2);  // v = frac * 2^e2, frac in [0.5, 1)
  const std::uint32_t biased = std::uint32_t(e2 - 1 + fmt.bias());
  const std::uint32_t mant = std::uint32_t(std::ldexp(frac, fmt.mant_bits + 1)) - (1u << fmt.mant_bits);
  return std::uint16_t(sign | (biased << fmt.mant_bits) | mant);
}

// ---- reductions -------------------------------------------------------------

template <class T>
T canonical(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) return std::numeric_limits<T>::quiet_NaN();
  }
  return v;
}

template <class T>
T combine(Op op, T acc, T x) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case Op::Sum: return acc + x;
      case Op::Product: return acc * x;
      case Op::Min: return (x < acc || std::isnan(x)) ? x : acc;
      case Op::Max: return (x > acc || std::isnan(x)) ? x : acc;
      default: break;
    }
  } else {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case Op::Sum: return T(U(U(acc) + U(x)));
      case Op::Product: return T(U(std::uint64_t(U(acc)) * std::uint64_t(U(x))));
      case Op::Min: return std::min(acc, x);
      case Op::Max: return std::max(acc, x);
      default: break;
    }
  }
  return acc;
}

// dst = srcs[0] op ... op srcs[n-1], then / divisor; floating NaN canonical.
template <class T>
void reduce(Op op, T* dst, const std::vector<const T*>& srcs, std::size_t count, int divisor) {
  for (std::size_t i = 0; i < count; ++i) {
    T acc = srcs[0][i];
    for (std::size_t s = 1; s < srcs.size(); ++s) acc = combine(op, acc, srcs[s][i]);
    if constexpr (std::is_floating_point_v<T>) {
      if (divisor > 0) acc = acc / T(divisor);
    }
    dst[i] = canonical(acc);
  }
}

// 16-bit floats: decode, accumulate in f32 left to right, round once.
inline void reduce16(Format fmt, Op op, std::uint16_t* dst,
                     const std::vector<const std::uint16_t*>& srcs, std::size_t count,
                     int divisor) {
  for (std::size_t i = 0; i < count; ++i) {
    float acc = decode(fmt, srcs[0][i]);
    for (std::size_t s = 1; s < srcs.size(); ++s) acc = combine(op, acc, decode(fmt, srcs[s][i]));
    if (divisor > 0) acc = acc / float(divisor);
    dst[i] = encode(fmt, canonical(acc));
  }
}

// Runs each test once per SIMD target compiled in and supported here.
inline std::vector<std::int64_t> all_targets() {
  static const std::vector<std::int64_t> targets = kernels::simd_targets();
  return targets;
}

// The test name of a suite instantiated over all_targets(): the target's name.
inline std::string target_name(const ::testing::TestParamInfo<std::int64_t>& info) {
  return kernels::simd_target_name(info.param);
}

}  // namespace kolo::ref
