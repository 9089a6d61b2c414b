// reduce() against the scalar reference, bit for bit, on every SIMD target:
// every dtype x op x nsrc x count x aliasing x divisor, unaligned buffers,
// guard elements after the end.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/reduce.h"
#include "kernels/targets.h"
#include "reference.h"

namespace kolo {
namespace {

constexpr int kNsrc[] = {1, 2, 3, 8};
constexpr std::size_t kCounts[] = {0, 1, 7, 15, 16, 17, 63, 1000, 4099};
constexpr Op kOps[] = {Op::Sum, Op::Min, Op::Max, Op::Product};
constexpr std::size_t kGuard = 8;  // elements after count that must stay untouched

// ---- input data ---------------------------------------------------------------
// Mostly ordinary values (around 1 so that products of 8 stay finite), with
// signed zeros, Inf, NaN (quiet and signalling, with payloads), subnormals
// and extremes mixed in; integers over their whole range.

template <class T>
T special_float(std::mt19937_64& rng) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  const T specials[] = {T(0), -T(0), std::numeric_limits<T>::infinity(),
                        -std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN(),
                        std::numeric_limits<T>::signaling_NaN(), std::numeric_limits<T>::denorm_min(),
                        -std::numeric_limits<T>::min() / 3, std::numeric_limits<T>::max(),
                        std::numeric_limits<T>::lowest()};
  const std::size_t k = rng() % (std::size(specials) + 1);
  if (k < std::size(specials)) return specials[k];
  // A NaN with a random payload and sign.
  Bits b = std::bit_cast<Bits>(std::numeric_limits<T>::infinity()) | Bits(rng() >> (sizeof(T) == 4 ? 41 : 12));
  if (rng() & 1) b |= Bits(1) << (8 * sizeof(T) - 1);
  if ((b & ~(Bits(1) << (8 * sizeof(T) - 1))) == std::bit_cast<Bits>(std::numeric_limits<T>::infinity())) b |= 1;
  return std::bit_cast<T>(b);
}

template <class T>
void fill(std::vector<T>& v, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> uni(-2.0, 2.0);
  for (auto& x : v) {
    if constexpr (std::is_floating_point_v<T>) {
      x = rng() % 50 == 0 ? special_float<T>(rng) : T(uni(rng));
    } else {
      x = static_cast<T>(rng());
      if (rng() % 4 == 0) x = static_cast<T>(x % 5);  // small values: products that do not vanish
    }
  }
}

// 16-bit floats: random values of moderate size, and 1 in 16 a random bit
// pattern (any NaN, Inf, subnormal, huge).
void fill16(ref::Format fmt, std::vector<std::uint16_t>& v, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (auto& x : v) {
    x = rng() % 16 == 0 ? std::uint16_t(rng()) : ref::encode(fmt, normal(rng));
  }
}

// ---- the test -------------------------------------------------------------

class ReduceTest : public ::testing::TestWithParam<std::int64_t> {
 protected:
  void SetUp() override {
    kernels::force_simd_target(GetParam());
    ASSERT_STREQ(kernels::active_simd_target(), kernels::simd_target_name(GetParam()));
  }
  void TearDown() override { kernels::force_simd_target(0); }
};

enum class Alias { None, First, Last };

std::string describe(DType t, Op op, int nsrc, std::size_t count, Alias alias, int divisor) {
  const char* a = alias == Alias::None ? "none" : alias == Alias::First ? "dst=srcs[0]" : "dst=srcs[n-1]";
  return std::string(dtype_name(t)) + " " + op_name(op) + " nsrc=" + std::to_string(nsrc) +
         " count=" + std::to_string(count) + " alias=" + a + " divisor=" + std::to_string(divisor);
}

// Storage type S; expected(op, dst, srcs, count, divisor) is the reference.
template <class S, class Fill, class Expected>
void run_matrix(DType t, bool floating, Fill fill_fn, Expected expected) {
  std::mt19937_64 rng(0x6b6f6c6f ^ static_cast<unsigned>(t));
  for (Op op : kOps) {
    for (int nsrc : kNsrc) {
      for (std::size_t count : kCounts) {
        for (Alias alias : {Alias::None, Alias::First, Alias::Last}) {
          for (int divisor : floating ? std::vector<int>{0, nsrc} : std::vector<int>{0}) {
            SCOPED_TRACE(describe(t, op, nsrc, count, alias, divisor));
            // Each source at its own odd offset: no two buffers share an alignment.
            std::vector<std::vector<S>> bufs(nsrc);
            std::vector<const S*> srcs(nsrc);
            for (int s = 0; s < nsrc; ++s) {
              bufs[s].resize(count + kGuard + 1 + s);
              fill_fn(bufs[s], rng);
              srcs[s] = bufs[s].data() + 1 + s % 4;
            }
            std::vector<S> want(count);
            expected(op, want.data(), srcs, count, divisor);

            std::vector<S> out_buf(count + kGuard + 3);
            fill_fn(out_buf, rng);
            S* dst = out_buf.data() + 3;
            if (alias == Alias::First) dst = bufs[0].data() + 1;
            if (alias == Alias::Last) dst = bufs[nsrc - 1].data() + 1 + (nsrc - 1) % 4;
            std::vector<S> guard(dst + count, dst + count + kGuard);

            std::vector<const void*> vsrcs(srcs.begin(), srcs.end());
            kernels::reduce(t, op, dst, vsrcs.data(), nsrc, count, divisor);

            std::size_t bad = 0;
            for (std::size_t i = 0; i < count; ++i) {
              if (std::memcmp(&dst[i], &want[i], sizeof(S)) != 0 && bad++ < 3) {
                ADD_FAILURE() << "element " << i << ": got " << +dst[i] << " want " << +want[i];
              }
            }
            ASSERT_EQ(bad, 0u);
            ASSERT_EQ(std::memcmp(dst + count, guard.data(), kGuard * sizeof(S)), 0)
                << "wrote past count";
          }
        }
      }
    }
  }
}

template <class T>
void run_native(DType t) {
  run_matrix<T>(
      t, std::is_floating_point_v<T>, [](std::vector<T>& v, std::mt19937_64& rng) { fill(v, rng); },
      [](Op op, T* dst, const std::vector<const T*>& srcs, std::size_t n, int div) {
        ref::reduce(op, dst, srcs, n, div);
      });
}

void run_half(DType t, ref::Format fmt) {
  run_matrix<std::uint16_t>(
      t, true, [fmt](std::vector<std::uint16_t>& v, std::mt19937_64& rng) { fill16(fmt, v, rng); },
      [fmt](Op op, std::uint16_t* dst, const std::vector<const std::uint16_t*>& srcs, std::size_t n,
            int div) { ref::reduce16(fmt, op, dst, srcs, n, div); });
}

TEST_P(ReduceTest, F32) { run_native<float>(DType::F32); }
TEST_P(ReduceTest, F64) { run_native<double>(DType::F64); }
TEST_P(ReduceTest, I32) { run_native<std::int32_t>(DType::I32); }
TEST_P(ReduceTest, I64) { run_native<std::int64_t>(DType::I64); }
TEST_P(ReduceTest, U8) { run_native<std::uint8_t>(DType::U8); }
TEST_P(ReduceTest, F16) { run_half(DType::F16, ref::kF16); }
TEST_P(ReduceTest, BF16) { run_half(DType::BF16, ref::kBF16); }

// The documented NaN and signed-zero rules, spelled out.
TEST_P(ReduceTest, MinMaxNaNAndZeros) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float a[] = {1.0f, nan, 0.0f, -0.0f, 3.0f};
  const float b[] = {nan, 2.0f, -0.0f, 0.0f, -INFINITY};
  const void* srcs[] = {a, b};
  float mn[5], mx[5];
  kernels::reduce(DType::F32, Op::Min, mn, srcs, 2, 5);
  kernels::reduce(DType::F32, Op::Max, mx, srcs, 2, 5);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(mn[0]), 0x7FC00000u);  // any NaN wins, canonical
  EXPECT_EQ(std::bit_cast<std::uint32_t>(mn[1]), 0x7FC00000u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(mn[2]), 0x00000000u);  // tie keeps the first source
  EXPECT_EQ(std::bit_cast<std::uint32_t>(mn[3]), 0x80000000u);
  EXPECT_EQ(mn[4], -INFINITY);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(mx[0]), 0x7FC00000u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(mx[1]), 0x7FC00000u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(mx[2]), 0x00000000u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(mx[3]), 0x80000000u);
  EXPECT_EQ(mx[4], 3.0f);
}

// bf16 average: the sum is rounded once, after the division.
TEST_P(ReduceTest, BF16RoundsOnce) {
  // 1 + 2^-8 is a tie between bf16 1.0 and 1 + 2^-7 (f32 sum exact): even -> 1.0.
  // Rounding each partial result instead would give a different answer below.
  const std::uint16_t one = 0x3F80, tiny = 0x3B80;  // 1.0, 2^-8
  const std::uint16_t a[] = {one, one}, b[] = {tiny, tiny}, c[] = {tiny, 0x3B81};
  const void* srcs[] = {a, b, c};
  std::uint16_t out[2];
  kernels::reduce(DType::BF16, Op::Sum, out, srcs, 3, 2);
  EXPECT_EQ(out[0], 0x3F81);  // 1 + 2^-7 exactly
  EXPECT_EQ(out[1], 0x3F81);  // 1 + 2^-7 + a bit: rounds to 1 + 2^-7
}

TEST_P(ReduceTest, Divide) {
  std::vector<float> f = {3.0f, -1.0f, 1.0f, 7.0f, INFINITY, 0.1f, 5.0f, 9.0f, 1e-40f};
  std::vector<float> want(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) want[i] = f[i] / 3.0f;
  kernels::divide(DType::F32, f.data(), f.size(), 3);
  for (std::size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(f[i]), std::bit_cast<std::uint32_t>(want[i])) << i;
  }
  std::vector<std::uint16_t> h = {0x3C00, 0x4200, 0x7BFF, 0x0001, 0xFC00};  // f16
  std::vector<std::uint16_t> hw(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) hw[i] = ref::encode(ref::kF16, ref::decode(ref::kF16, h[i]) / 4.0f);
  kernels::divide(DType::F16, h.data(), h.size(), 4);
  EXPECT_EQ(h, hw);
}


INSTANTIATE_TEST_SUITE_P(Targets, ReduceTest, ::testing::ValuesIn(ref::all_targets()), ref::target_name);

// ---- misuse -----------------------------------------------------------------

TEST(ReduceErrors, DivisorNeedsFloatingType) {
  std::int32_t a[4] = {1, 2, 3, 4};
  const void* srcs[] = {a};
  for (DType t : {DType::I32, DType::I64, DType::U8}) {
    EXPECT_THROW(kernels::reduce(t, Op::Sum, a, srcs, 1, 1, 2), Error) << dtype_name(t);
    EXPECT_THROW(kernels::divide(t, a, 1, 2), Error) << dtype_name(t);
  }
  try {
    kernels::reduce(DType::I64, Op::Sum, a, srcs, 1, 1, 4);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("i64"), std::string::npos) << e.what();
  }
}

TEST(ReduceErrors, BadArguments) {
  float a[4] = {};
  const void* srcs[] = {a};
  EXPECT_THROW(kernels::reduce(DType::F32, Op::Average, a, srcs, 1, 4), Error);
  EXPECT_THROW(kernels::reduce(DType::F32, Op::Sum, a, srcs, 0, 4), Error);
  EXPECT_THROW(kernels::reduce(DType::F32, Op::Sum, a, srcs, 1, 4, -1), Error);
  EXPECT_THROW(kernels::divide(DType::F32, a, 4, 0), Error);
  // Count 0 touches nothing, even through null pointers.
  EXPECT_NO_THROW(kernels::reduce(DType::F32, Op::Sum, nullptr, srcs, 1, 0));
}

}  // namespace
}  // namespace kolo
