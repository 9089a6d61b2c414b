#include "values.h"

#include <cmath>
#include <cstring>

namespace kolo_bench {

namespace {

using kolo::DType;
using kolo::Op;

// IEEE binary16 of a value it holds exactly (a normal number or zero): no
// rounding is needed, which keeps this independent of the library's kernels.
std::uint16_t half_bits(double v) {
  if (v == 0) return 0;
  const std::uint16_t sign = v < 0 ? 0x8000 : 0;
  const double a = std::fabs(v);
  const int e = std::ilogb(a);                   // a = (1 + m) * 2^e
  const double m = std::ldexp(a, -e) - 1.0;      // exact, m < 1
  return static_cast<std::uint16_t>(sign | ((e + 15) << 10) | static_cast<unsigned>(m * 1024));
}

double half_value(std::uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) v = m ? NAN : INFINITY;
  else if (e == 0) v = std::ldexp(m, -24);
  else v = std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

// bfloat16 is the top half of an f32; the values here have no low bits to round.
std::uint16_t bf16_bits(double v) {
  const float f = static_cast<float>(v);
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  return static_cast<std::uint16_t>(x >> 16);
}

double bf16_value(std::uint16_t b) {
  const std::uint32_t x = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

template <class T>
void store(void* buf, std::size_t i, T v) {
  std::memcpy(static_cast<char*>(buf) + i * sizeof(T), &v, sizeof(T));
}
template <class T>
T load(const void* buf, std::size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(buf) + i * sizeof(T), sizeof(T));
  return v;
}

bool is_signed(DType t) { return t != DType::U8; }
bool is_integer(DType t) { return t == DType::I32 || t == DType::I64 || t == DType::U8; }

// Two's-complement wrap of an exact integer result to the width of t.
double wrap(DType t, double v) {
  const auto x = static_cast<std::int64_t>(v);
  switch (t) {
    case DType::I32: return static_cast<std::int32_t>(static_cast<std::uint32_t>(x));
    case DType::U8: return static_cast<double>(x & 0xff);
    default: return v;
  }
}

// Average inputs: rank offsets that cancel in pairs (the last of an odd number
// of ranks adds 0), so the sum is n * base and the mean is exactly base.
double average_offset(int rank, int n) {
  if (n % 2 == 1 && rank == n - 1) return 0;
  const double mag = 1 + (rank / 2) % 3;
  return rank % 2 == 0 ? mag : -mag;
}

}  // namespace

void put(DType t, void* buf, std::size_t i, double v) {
  switch (t) {
    case DType::F32: store<float>(buf, i, static_cast<float>(v)); break;
    case DType::F64: store<double>(buf, i, v); break;
    case DType::F16: store<std::uint16_t>(buf, i, half_bits(v)); break;
    case DType::BF16: store<std::uint16_t>(buf, i, bf16_bits(v)); break;
    case DType::I32: store<std::int32_t>(buf, i, static_cast<std::int32_t>(v)); break;
    case DType::I64: store<std::int64_t>(buf, i, static_cast<std::int64_t>(v)); break;
    case DType::U8: store<std::uint8_t>(buf, i, static_cast<std::uint8_t>(v)); break;
  }
}

double get(DType t, const void* buf, std::size_t i) {
  switch (t) {
    case DType::F32: return load<float>(buf, i);
    case DType::F64: return load<double>(buf, i);
    case DType::F16: return half_value(load<std::uint16_t>(buf, i));
    case DType::BF16: return bf16_value(load<std::uint16_t>(buf, i));
    case DType::I32: return load<std::int32_t>(buf, i);
    case DType::I64: return static_cast<double>(load<std::int64_t>(buf, i));
    case DType::U8: return load<std::uint8_t>(buf, i);
  }
  return NAN;
}

double reduce_input(DType t, Op op, int rank, int n, std::size_t i) {
  switch (op) {
    case Op::Average:
      return static_cast<double>(i % 9) - 4 + average_offset(rank, n);
    case Op::Product: {
      // One rank contributes a 2 (and, for signed types, one a sign) per
      // element: the product stays within +-2 for any number of ranks.
      double v = static_cast<std::size_t>(rank) == i % n ? 2 : 1;
      if (is_signed(t) && i % 3 == 0 && static_cast<std::size_t>(rank) == (i + 1) % n) v = -v;
      return v;
    }
    default: {  // Sum, Min, Max: 0..8, shifted to -4..4 for signed types
      const double v = static_cast<double>(((i % 9) * 5 + static_cast<std::size_t>(rank) * 4) % 9);
      return is_signed(t) ? v - 4 : v;
    }
  }
}

double reduce_expected(DType t, Op op, int n, std::size_t i) {
  double acc = reduce_input(t, op, 0, n, i);
  for (int r = 1; r < n; ++r) {
    const double x = reduce_input(t, op, r, n, i);
    switch (op) {
      case Op::Sum: case Op::Average: acc += x; break;
      case Op::Min: acc = std::min(acc, x); break;
      case Op::Max: acc = std::max(acc, x); break;
      case Op::Product: acc *= x; break;
    }
  }
  if (op == Op::Average) acc /= n;
  return is_integer(t) ? wrap(t, acc) : acc;
}

double move_value(DType t, int rank, std::size_t i) {
  const double v = static_cast<double>(((i % 251) * 7 + static_cast<std::size_t>(rank) * 13) % 251);
  return is_signed(t) ? v - 125 : v;
}

void poison(DType t, void* buf, std::size_t count) {
  // All-ones is NaN in every floating type and 255 in u8 (never expected);
  // 0x5a5a... is far outside the integers' small range.
  const int byte = (t == DType::I32 || t == DType::I64) ? 0x5a : 0xff;
  std::memset(buf, byte, count * kolo::dtype_size(t));
}

}  // namespace kolo_bench
