// Independent reference arithmetic for the collective tests: element
// encoding (including its own f16/bf16 rounding, separate from the library's
// kernels) and the expected result of each reduction.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kolo/kolo.h"

namespace kolo::test {

// IEEE binary16, round to nearest even.
inline std::uint16_t to_half(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000;
  const std::uint32_t exp = (x >> 23) & 0xff;
  std::uint32_t man = x & 0x7fffff;
  if (exp == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00 | (man ? 0x200 : 0));
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00);
  if (e <= 0) {  // subnormal half (or zero)
    if (e < -10) return static_cast<std::uint16_t>(sign);
    man |= 0x800000;
    const int shift = 14 - e;
    std::uint32_t half = man >> shift;
    const std::uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (man >> 13);
  const std::uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into the exponent: correct
  return static_cast<std::uint16_t>(sign | half);
}

inline std::uint16_t to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<std::uint16_t>((x >> 16) | 0x40);
  const std::uint32_t rem = x & 0xffff;
  std::uint32_t hi = x >> 16;
  if (rem > 0x8000 || (rem == 0x8000 && (hi & 1))) ++hi;
  return static_cast<std::uint16_t>(hi);
}

// Writes v (exactly representable or rounded per the type) into element i of buf.
inline void put(DType t, void* buf, std::size_t i, double v) {
  auto* p = static_cast<char*>(buf);
  switch (t) {
    case DType::F32: { float f = static_cast<float>(v); std::memcpy(p + 4 * i, &f, 4); break; }
    case DType::F64: std::memcpy(p + 8 * i, &v, 8); break;
    case DType::F16: { auto h = to_half(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); break; }
    case DType::BF16: { auto h = to_bf16(static_cast<float>(v)); std::memcpy(p + 2 * i, &h, 2); break; }
    case DType::I32: { auto x = static_cast<std::int32_t>(static_cast<std::int64_t>(v)); std::memcpy(p + 4 * i, &x, 4); break; }
    case DType::I64: { auto x = static_cast<std::int64_t>(v); std::memcpy(p + 8 * i, &x, 8); break; }
    case DType::U8: { auto x = static_cast<std::uint8_t>(static_cast<std::int64_t>(v) & 0xff); p[i] = static_cast<char>(x); break; }
  }
}

// The test's input values: small integers, so sums of up to 8 ranks are exact
// in every type and any summation order gives the same answer.
inline double input_value(DType t, Op op, int rank, std::size_t i) {
  if (op == Op::Product) {
    double v = ((rank + i) % 3 == 0) ? 2 : 1;
    return (t != DType::U8 && i % 5 == 0 && rank == 0) ? -v : v;
  }
  double v = static_cast<double>((rank * 7 + i * 13 + 3) % 11);
  return t == DType::U8 ? v : v - 5;
}

// The expected reduction of vals (in rank order) in type t.
inline double expected(DType t, Op op, const std::vector<double>& vals) {
  double acc = vals[0];
  for (std::size_t k = 1; k < vals.size(); ++k) {
    switch (op) {
      case Op::Sum: case Op::Average: acc += vals[k]; break;
      case Op::Min: acc = std::min(acc, vals[k]); break;
      case Op::Max: acc = std::max(acc, vals[k]); break;
      case Op::Product: acc *= vals[k]; break;
    }
  }
  if (op == Op::Average) {
    const double n = static_cast<double>(vals.size());
    // f16/bf16 are divided in f32 (then rounded by put()), f32 in f32, f64 in f64.
    return t == DType::F64 ? acc / n : static_cast<double>(static_cast<float>(acc) / static_cast<float>(n));
  }
  return acc;
}

}  // namespace kolo::test
