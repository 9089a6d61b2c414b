// f32 <-> f16/bf16: the scalar conversions against the independent reference
// (exhaustive over the 16-bit patterns, ties, specials, a sweep of f32), and
// the vector conversions against the scalar ones on every SIMD target.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "kernels/targets.h"
#include "reference.h"

namespace kolo {
namespace {

using kernels::bf16_to_float;
using kernels::float_to_bf16;
using kernels::float_to_half;
using kernels::half_to_float;

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }
float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

std::uint16_t to16(ref::Format fmt, float f) {
  return fmt.exp_bits == 5 ? float_to_half(f).bits : float_to_bf16(f).bits;
}
float from16(ref::Format fmt, std::uint16_t h) {
  return fmt.exp_bits == 5 ? half_to_float(Half{h}) : bf16_to_float(BFloat16{h});
}
bool is_nan16(ref::Format fmt, std::uint16_t h) {
  const std::uint16_t mag = h & 0x7FFF;
  return fmt.exp_bits == 5 ? mag > 0x7C00 : mag > 0x7F80;
}
std::uint16_t quiet_bit(ref::Format fmt) { return fmt.exp_bits == 5 ? 0x0200 : 0x0040; }

// f32 values that exercise rounding: for each 16-bit pattern h, the value of
// h, the exact midpoint to the next pattern (a tie), and its f32 neighbours.
std::vector<float> rounding_cases(ref::Format fmt) {
  std::vector<float> out;
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const std::uint16_t lo = std::uint16_t(h);
    if (is_nan16(fmt, lo) || (lo & 0x7FFF) == (fmt.exp_bits == 5 ? 0x7C00 : 0x7F80)) continue;
    const double a = ref::decode(fmt, lo);
    // next pattern up in magnitude (0x7C00/0x7F80, i.e. Inf, stands for 2^(bias+1))
    const std::uint16_t next = std::uint16_t(lo + 1);
    const bool next_inf = (next & 0x7FFF) == (fmt.exp_bits == 5 ? 0x7C00 : 0x7F80);
    const double b = next_inf ? std::copysign(std::ldexp(1.0, fmt.bias() + 1), a) : ref::decode(fmt, next);
    const float mid = float((a + b) / 2);  // exact in f32: one more bit than the format
    out.push_back(float(a));
    out.push_back(mid);
    out.push_back(std::nextafter(mid, 0.0f));
    out.push_back(std::nextafter(mid, mid * 2));
  }
  return out;
}

std::vector<float> special_cases() {
  std::vector<float> v = {0.0f, -0.0f, INFINITY, -INFINITY, 65504.0f, 65519.996f, 65520.0f, -65520.0f,
                          65536.0f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(), 0x1p-24f, 0x1p-25f, 0x1.000002p-25f,
                          0x1.8p-24f, 0x1p-14f, 0x1.ff8p-15f, 1.0f, 0x1.002p0f, 0x1.006p0f, 0x1.01p0f,
                          0x1.03p0f, from_bits(0x7F7F7FFF), from_bits(0x7F7F8000), from_bits(0x00008000),
                          from_bits(0x00018000), from_bits(0x007FFFFF)};
  // NaNs: quiet, signalling, payloads, both signs.
  for (std::uint32_t u : {0x7FC00000u, 0x7F800001u, 0x7FA00000u, 0x7FBFFFFFu, 0x7FFFFFFFu, 0xFFC00000u,
                          0xFF800001u, 0x7F802000u, 0x7F810000u, 0x7F80FFFFu}) {
    v.push_back(from_bits(u));
  }
  return v;
}

// ---- scalar conversions vs the reference (target-independent) ---------------

void check_scalar_exhaustive(ref::Format fmt) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const std::uint16_t x = std::uint16_t(h);
    const float f = from16(fmt, x);
    ASSERT_EQ(bits(f), bits(ref::decode(fmt, x))) << std::hex << "pattern 0x" << h;
    // Back again: identity, except that NaNs come back quiet.
    const std::uint16_t want = is_nan16(fmt, x) ? std::uint16_t(x | quiet_bit(fmt)) : x;
    ASSERT_EQ(to16(fmt, f), want) << std::hex << "pattern 0x" << h;
  }
}

void check_scalar_rounding(ref::Format fmt) {
  for (float f : rounding_cases(fmt)) {
    ASSERT_EQ(to16(fmt, f), ref::encode(fmt, f)) << std::hexfloat << f << " bits 0x" << std::hex << bits(f);
  }
  for (float f : special_cases()) {
    ASSERT_EQ(to16(fmt, f), ref::encode(fmt, f)) << std::hexfloat << f << " bits 0x" << std::hex << bits(f);
  }
  // A sweep of the whole f32 space (every 4099th pattern).
  for (std::uint64_t u = 0; u < (1ull << 32); u += 4099) {
    const float f = from_bits(std::uint32_t(u));
    ASSERT_EQ(to16(fmt, f), ref::encode(fmt, f)) << std::hex << "f32 bits 0x" << u;
  }
}

TEST(ScalarConvert, F16Exhaustive) { check_scalar_exhaustive(ref::kF16); }
TEST(ScalarConvert, BF16Exhaustive) { check_scalar_exhaustive(ref::kBF16); }
TEST(ScalarConvert, F16Rounding) { check_scalar_rounding(ref::kF16); }
TEST(ScalarConvert, BF16Rounding) { check_scalar_rounding(ref::kBF16); }

TEST(ScalarConvert, KnownValues) {
  EXPECT_EQ(float_to_half(65504.0f).bits, 0x7BFF);
  EXPECT_EQ(float_to_half(65519.996f).bits, 0x7BFF);  // below the midpoint
  EXPECT_EQ(float_to_half(65520.0f).bits, 0x7C00);    // the midpoint ties to even: Inf
  EXPECT_EQ(float_to_half(-1e9f).bits, 0xFC00);
  EXPECT_EQ(float_to_half(0x1p-24f).bits, 0x0001);    // smallest subnormal
  EXPECT_EQ(float_to_half(0x1p-25f).bits, 0x0000);    // tie: to even (zero)
  EXPECT_EQ(float_to_half(0x1.8p-24f).bits, 0x0002);  // tie 1.5 quanta: to even (2)
  EXPECT_EQ(float_to_half(1e-10f).bits, 0x0000);
  EXPECT_EQ(float_to_half(from_bits(0x7F800001)).bits, 0x7E00);  // signalling NaN made quiet
  EXPECT_EQ(float_to_half(from_bits(0xFFC12345)).bits, 0xFE09);  // sign and top payload kept
  EXPECT_EQ(bits(half_to_float(Half{0x0001})), bits(0x1p-24f));
  EXPECT_EQ(bits(half_to_float(Half{0x7D00})), 0x7FE00000u);  // signalling NaN made quiet

  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3F80);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808000)).bits, 0x3F80);  // tie, even stays
  EXPECT_EQ(float_to_bf16(from_bits(0x3F818000)).bits, 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001)).bits, 0x3F81);  // above the tie: up
  EXPECT_EQ(float_to_bf16(from_bits(0x3F80FFFF)).bits, 0x3F81);  // truncation would give 0x3F80
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()).bits, 0x7F80);  // overflows to Inf
  EXPECT_EQ(float_to_bf16(from_bits(0x7F7F7FFF)).bits, 0x7F7F);
  EXPECT_EQ(float_to_bf16(from_bits(0x00018000)).bits, 0x0002);  // subnormal tie to even
  EXPECT_EQ(float_to_bf16(from_bits(0x7F800001)).bits, 0x7FC0);  // NaN with low payload stays NaN
  EXPECT_EQ(float_to_bf16(from_bits(0xFF80FFFF)).bits, 0xFFC0);
  EXPECT_EQ(bits(bf16_to_float(BFloat16{0x7F81})), 0x7FC10000u);  // quiet
}

#if defined(__FLT16_MAX__)
// A second, unrelated reference where the compiler has _Float16 (g++ >= 12, x86).
TEST(ScalarConvert, F16MatchesCompiler) {
  for (std::uint64_t u = 7; u < (1ull << 32); u += 65537) {
    const float f = from_bits(std::uint32_t(u));
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    ASSERT_EQ(float_to_half(f).bits, std::bit_cast<std::uint16_t>(h)) << std::hex << "f32 bits 0x" << u;
  }
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const _Float16 x = std::bit_cast<_Float16>(std::uint16_t(h));
    if ((h & 0x7FFF) > 0x7C00) continue;
    ASSERT_EQ(bits(half_to_float(Half{std::uint16_t(h)})), bits(static_cast<float>(x))) << std::hex << h;
  }
}
#endif

// ---- vector conversions vs scalar, per target ---------------------------------

class ConvertTest : public ::testing::TestWithParam<std::int64_t> {
 protected:
  void SetUp() override {
    kernels::force_simd_target(GetParam());
    ASSERT_STREQ(kernels::active_simd_target(), kernels::simd_target_name(GetParam()));
  }
  void TearDown() override { kernels::force_simd_target(0); }
};

// 16-bit -> f32 on all 65536 patterns, at unaligned offsets and with short
// counts (tails), then f32 -> 16-bit on the ties, specials and a sweep.
template <class T16>
void check_vector(ref::Format fmt, void (*up)(const T16*, float*, std::size_t),
                  void (*down)(const float*, T16*, std::size_t)) {
  std::vector<T16> all(0x10000 + 1);
  for (std::uint32_t h = 0; h < 0x10000; ++h) all[h + 1].bits = std::uint16_t(h);
  std::vector<float> f(0x10000 + 3);
  up(all.data() + 1, f.data() + 3, 0x10000);
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    ASSERT_EQ(bits(f[h + 3]), bits(from16(fmt, std::uint16_t(h)))) << std::hex << "pattern 0x" << h;
  }

  std::vector<float> in = rounding_cases(fmt);
  for (float s : special_cases()) in.push_back(s);
  for (std::uint64_t u = 0; u < (1ull << 32); u += 65521) in.push_back(from_bits(std::uint32_t(u)));
  for (std::size_t offset : {0, 1, 5}) {
    std::vector<T16> out(in.size() + 1, T16{0xABCD});
    const std::size_t n = in.size() - offset;
    down(in.data() + offset, out.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i].bits, to16(fmt, in[i + offset])) << std::hexfloat << in[i + offset];
    }
    ASSERT_EQ(out[n].bits, 0xABCD) << "wrote past count";
  }
  // Short counts: only the tail path.
  for (std::size_t n = 0; n < 40; ++n) {
    std::vector<float> back(n + 1, -7.0f);
    up(all.data() + 0x3C00, back.data(), n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits(back[i]), bits(from16(fmt, std::uint16_t(0x3BFF + i))));
    ASSERT_EQ(back[n], -7.0f);
    std::vector<T16> down_out(n + 1, T16{0xABCD});
    down(in.data() + 17, down_out.data(), n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(down_out[i].bits, to16(fmt, in[17 + i]));
    ASSERT_EQ(down_out[n].bits, 0xABCD);
  }
}

TEST_P(ConvertTest, F16) { check_vector<Half>(ref::kF16, kernels::f16_to_f32, kernels::f32_to_f16); }
TEST_P(ConvertTest, BF16) { check_vector<BFloat16>(ref::kBF16, kernels::bf16_to_f32, kernels::f32_to_bf16); }


INSTANTIATE_TEST_SUITE_P(Targets, ConvertTest, ::testing::ValuesIn(ref::all_targets()), ref::target_name);

}  // namespace
}  // namespace kolo
