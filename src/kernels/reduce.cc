// Reduction and conversion kernels: Highway code compiled once per SIMD target
// (foreach_target.h re-includes this file), the best target of the CPU chosen
// at run time (HWY_DYNAMIC_DISPATCH).
//
// Shape of every kernel: one pass over memory. A block of 4 vectors is loaded
// from srcs[0], the other sources are folded into those registers left to
// right, the result is finished (divided, NaN canonicalised) and stored. The
// last partial block goes through a small stack buffer with exactly the same
// vector code, so there is no scalar tail whose rounding or NaN handling could
// differ from the body: the bits of element i never depend on i, on count, on
// alignment or on the target (tests/kernels runs every target against one
// scalar reference).
//
// Min/Max on floating types (f16/bf16 in f32): left to right,
//   min(acc, x) = (x < acc || isnan(x)) ? x : acc
//   max(acc, x) = (x > acc || isnan(x)) ? x : acc
// so any NaN input gives NaN, and ties (+0 vs -0) keep the earlier source.
// Floating results that are NaN are stored as the canonical quiet NaN
// (f32 0x7FC00000, f64 0x7FF8000000000000, f16 0x7E00, bf16 0x7FC0): NaN
// payloads after arithmetic differ between ISAs and compilers, and every rank
// must get the same bits.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/reduce.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "kernels/codec-inl.h"
#include "kolo/kolo.h"

#ifndef KOLO_KERNELS_REDUCE_CC_ONCE_
#define KOLO_KERNELS_REDUCE_CC_ONCE_
namespace kolo::kernels {
enum class Conversion : int { F32ToF16, F16ToF32, F32ToBF16, BF16ToF32 };
}  // namespace kolo::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace kolo::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- one reduction step: acc op x -------------------------------------------

template <Op kOp, class D>
HWY_INLINE hn::Vec<D> Combine(D d, hn::Vec<D> acc, hn::Vec<D> x) {
  using T = hn::TFromD<D>;
  if constexpr (kOp == Op::Sum) {
    return hn::Add(acc, x);  // integer lanes are unsigned here: wraps
  } else if constexpr (kOp == Op::Product) {
#if HWY_TARGET == HWY_SCALAR
    return hn::Mul(acc, x);  // one lane: plain (wrapping) multiply
#else
    if constexpr (std::is_same_v<T, uint8_t>) {
      // No 8-bit multiply: multiply 16-bit lanes. The low byte of a 16-bit
      // product is the product of the low bytes (mod 256); the high bytes are
      // multiplied after shifting them down.
      const hn::Repartition<uint16_t, D> d16;
      const auto a = hn::BitCast(d16, acc);
      const auto b = hn::BitCast(d16, x);
      const auto lo = hn::And(hn::Mul(a, b), hn::Set(d16, 0x00FF));
      const auto hi = hn::ShiftLeft<8>(hn::Mul(hn::ShiftRight<8>(a), hn::ShiftRight<8>(b)));
      return hn::BitCast(d, hn::Or(lo, hi));
    } else if constexpr (std::is_same_v<T, uint64_t>) {
      // No 64-bit multiply before AVX-512DQ: 32x32->64 partial products,
      // keeping the low 64 bits (the high*high term only affects bits >= 64).
      const hn::Repartition<uint32_t, D> d32;
      const auto alo = hn::BitCast(d32, acc);
      const auto blo = hn::BitCast(d32, x);
      const auto ahi = hn::BitCast(d32, hn::ShiftRight<32>(acc));
      const auto bhi = hn::BitCast(d32, hn::ShiftRight<32>(x));
      const auto cross = hn::Add(hn::MulEven(ahi, blo), hn::MulEven(alo, bhi));
      return hn::Add(hn::MulEven(alo, blo), hn::ShiftLeft<32>(cross));
    } else {
      return hn::Mul(acc, x);
    }
#endif
  } else if constexpr (kOp == Op::Min) {
    if constexpr (hwy::IsFloat<T>()) {
      return hn::IfThenElse(hn::Or(hn::Lt(x, acc), hn::IsNaN(x)), x, acc);
    } else {
      return hn::Min(acc, x);
    }
  } else {
    static_assert(kOp == Op::Max);
    if constexpr (hwy::IsFloat<T>()) {
      return hn::IfThenElse(hn::Or(hn::Gt(x, acc), hn::IsNaN(x)), x, acc);
    } else {
      return hn::Max(acc, x);
    }
  }
}

// Divide (floating lanes only) and canonicalise NaN before the store.
template <bool kDiv, class D>
HWY_INLINE hn::Vec<D> Finish(D d, hn::Vec<D> v, hn::Vec<D> divisor) {
  using T = hn::TFromD<D>;
  if constexpr (hwy::IsFloat<T>()) {
    if constexpr (kDiv) v = hn::Div(v, divisor);
    const hn::RebindToUnsigned<D> du;
    using TU = hn::TFromD<decltype(du)>;
    constexpr TU kQNaN = sizeof(T) == 4 ? TU(0x7FC00000u) : TU(0x7FF8000000000000ull);
    return hn::IfThenElse(hn::IsNaN(v), hn::BitCast(d, hn::Set(du, kQNaN)), v);
  } else {
    return v;
  }
}

// Largest vector of any target, in bytes; a tail buffer holds one block.
constexpr size_t kMaxVectorBytes = HWY_MAX_BYTES;

template <class Codec>
using BlockBuffer = typename Codec::TS[4 * kMaxVectorBytes / sizeof(typename Codec::TC)];

template <class Codec, Op kOp, bool kDiv>
HWY_NOINLINE void ReduceLoop(void* dst_v, const void* const* srcs, int nsrc, size_t count,
                             int divisor) {
  using TS = typename Codec::TS;
  using TC = typename Codec::TC;
  const hn::ScalableTag<TC> d;
  const size_t block = 4 * hn::Lanes(d);
  TS* const dst = static_cast<TS*>(dst_v);
  const auto vdiv = hn::Set(d, static_cast<TC>(divisor > 0 ? divisor : 1));
  auto src = [srcs](int s, size_t i) { return static_cast<const TS*>(srcs[s]) + i; };
  hn::Vec<decltype(d)> a0, a1, a2, a3, b0, b1, b2, b3;

  // One block from each source at p(s), folded into a0..a3.
  auto fold = [&](auto p) HWY_ATTR {
    Codec::LoadBlock(d, p(0), a0, a1, a2, a3);
    for (int s = 1; s < nsrc; ++s) {
      Codec::LoadBlock(d, p(s), b0, b1, b2, b3);
      a0 = Combine<kOp>(d, a0, b0);
      a1 = Combine<kOp>(d, a1, b1);
      a2 = Combine<kOp>(d, a2, b2);
      a3 = Combine<kOp>(d, a3, b3);
    }
  };
  auto store = [&](TS* p) HWY_ATTR {
    Codec::StoreBlock(d, Finish<kDiv>(d, a0, vdiv), Finish<kDiv>(d, a1, vdiv),
                      Finish<kDiv>(d, a2, vdiv), Finish<kDiv>(d, a3, vdiv), p);
  };

  size_t i = 0;
  for (; i + block <= count; i += block) {
    fold([&](int s) { return src(s, i); });
    store(dst + i);
  }
  // Last partial block: through a buffer, so nothing past count is read or
  // written and the arithmetic is exactly that of the body.
  if (i < count) {
    const size_t bytes = (count - i) * sizeof(TS);
    alignas(64) BlockBuffer<Codec> buf = {};
    fold([&](int s) {
      std::memcpy(buf, src(s, i), bytes);
      return static_cast<const TS*>(buf);
    });
    store(buf);
    std::memcpy(dst + i, buf, bytes);
  }
}

template <class Codec, Op kOp>
void ReduceWith(void* dst, const void* const* srcs, int nsrc, size_t count, int divisor) {
  if constexpr (hwy::IsFloat<typename Codec::TC>()) {
    if (divisor > 0) return ReduceLoop<Codec, kOp, true>(dst, srcs, nsrc, count, divisor);
  }
  ReduceLoop<Codec, kOp, false>(dst, srcs, nsrc, count, divisor);
}

template <class Codec>
void ReduceOp(Op op, void* dst, const void* const* srcs, int nsrc, size_t count, int divisor) {
  switch (op) {
    case Op::Sum: return ReduceWith<Codec, Op::Sum>(dst, srcs, nsrc, count, divisor);
    case Op::Product: return ReduceWith<Codec, Op::Product>(dst, srcs, nsrc, count, divisor);
    case Op::Min: return ReduceWith<Codec, Op::Min>(dst, srcs, nsrc, count, divisor);
    case Op::Max: return ReduceWith<Codec, Op::Max>(dst, srcs, nsrc, count, divisor);
    case Op::Average: break;  // rejected by the caller
  }
}

// Signed integers are summed and multiplied in unsigned lanes (same bits,
// wrapping without undefined behaviour); Min/Max need the signed lanes.
template <typename TSigned>
void ReduceSigned(Op op, void* dst, const void* const* srcs, int nsrc, size_t count) {
  using TU = std::make_unsigned_t<TSigned>;
  if (op == Op::Sum || op == Op::Product) {
    ReduceOp<NativeCodec<TU>>(op, dst, srcs, nsrc, count, 0);
  } else {
    ReduceOp<NativeCodec<TSigned>>(op, dst, srcs, nsrc, count, 0);
  }
}

void ReduceImpl(DType t, Op op, void* dst, const void* const* srcs, int nsrc, size_t count,
                int divisor) {
  switch (t) {
    case DType::F32: return ReduceOp<NativeCodec<float>>(op, dst, srcs, nsrc, count, divisor);
    case DType::F64: return ReduceOp<NativeCodec<double>>(op, dst, srcs, nsrc, count, divisor);
    case DType::F16: return ReduceOp<F16Codec>(op, dst, srcs, nsrc, count, divisor);
    case DType::BF16: return ReduceOp<BF16PairCodec>(op, dst, srcs, nsrc, count, divisor);
    case DType::I32: return ReduceSigned<int32_t>(op, dst, srcs, nsrc, count);
    case DType::I64: return ReduceSigned<int64_t>(op, dst, srcs, nsrc, count);
    case DType::U8: return ReduceOp<NativeCodec<uint8_t>>(op, dst, srcs, nsrc, count, 0);
  }
}

// ---- conversions --------------------------------------------------------------

// f32 lanes from In, to Out; kQuiet sets the quiet bit of NaNs on the way
// (bf16 -> f32 is otherwise an exact bit copy; F16C already quiets).
template <class In, class Out, bool kQuiet>
HWY_NOINLINE void ConvertLoop(const void* in_v, void* out_v, size_t count) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const size_t block = 4 * hn::Lanes(d);
  const auto* in = static_cast<const typename In::TS*>(in_v);
  auto* out = static_cast<typename Out::TS*>(out_v);
  auto quiet = [&](hn::Vec<decltype(d)> v) HWY_ATTR {
    if constexpr (!kQuiet) return v;
    const auto q = hn::BitCast(d, hn::Or(hn::BitCast(du, v), hn::Set(du, 0x00400000u)));
    return hn::IfThenElse(hn::IsNaN(v), q, v);
  };
  hn::Vec<decltype(d)> v0, v1, v2, v3;
  auto convert = [&](const typename In::TS* p, typename Out::TS* q) HWY_ATTR {
    In::LoadBlock(d, p, v0, v1, v2, v3);
    Out::StoreBlock(d, quiet(v0), quiet(v1), quiet(v2), quiet(v3), q);
  };
  size_t i = 0;
  for (; i + block <= count; i += block) convert(in + i, out + i);
  if (i < count) {
    alignas(64) BlockBuffer<In> ibuf = {};
    alignas(64) BlockBuffer<Out> obuf;
    std::memcpy(ibuf, in + i, (count - i) * sizeof(*in));
    convert(ibuf, obuf);
    std::memcpy(out + i, obuf, (count - i) * sizeof(*out));
  }
}

void ConvertImpl(Conversion c, const void* in, void* out, size_t count) {
  switch (c) {
    case Conversion::F32ToF16: return ConvertLoop<NativeCodec<float>, F16Codec, false>(in, out, count);
    case Conversion::F16ToF32: return ConvertLoop<F16Codec, NativeCodec<float>, false>(in, out, count);
    case Conversion::F32ToBF16: return ConvertLoop<NativeCodec<float>, BF16Codec, false>(in, out, count);
    case Conversion::BF16ToF32: return ConvertLoop<BF16Codec, NativeCodec<float>, true>(in, out, count);
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace kolo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

// ============================================================================
#if HWY_ONCE

#include <bit>

#include "core/error.h"
#include "kernels/reduce.h"
#include "kernels/targets.h"

namespace kolo::kernels {

HWY_EXPORT(ReduceImpl);
HWY_EXPORT(ConvertImpl);
HWY_EXPORT(TargetNameImpl);

namespace {

bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

void convert(Conversion c, const void* in, void* out, std::size_t count) {
  if (count == 0) return;
  HWY_DYNAMIC_DISPATCH(ConvertImpl)(c, in, out, count);
}

}  // namespace

void reduce(DType t, Op op, void* dst, const void* const* srcs, int nsrc, std::size_t count,
            int divisor) {
  KOLO_CHECK(nsrc >= 1, "reduce: nsrc must be >= 1, got {}", nsrc);
  KOLO_CHECK(op != Op::Average,
             "reduce: Op::Average reaches the kernels as Sum with a divisor");
  KOLO_CHECK(divisor >= 0, "reduce: divisor must be >= 0, got {}", divisor);
  KOLO_CHECK(divisor == 0 || is_floating(t),
             "reduce: a divisor ({}) needs a floating type, got {}", divisor, dtype_name(t));
  if (count == 0) return;
  HWY_DYNAMIC_DISPATCH(ReduceImpl)(t, op, dst, srcs, nsrc, count, divisor);
}

void divide(DType t, void* data, std::size_t count, int divisor) {
  KOLO_CHECK(divisor > 0, "divide: divisor must be > 0, got {}", divisor);
  KOLO_CHECK(is_floating(t), "divide: needs a floating type, got {}", dtype_name(t));
  const void* src = data;
  reduce(t, Op::Sum, data, &src, 1, count, divisor);
}

void f32_to_f16(const float* in, Half* out, std::size_t count) {
  convert(Conversion::F32ToF16, in, out, count);
}
void f16_to_f32(const Half* in, float* out, std::size_t count) {
  convert(Conversion::F16ToF32, in, out, count);
}
void f32_to_bf16(const float* in, BFloat16* out, std::size_t count) {
  convert(Conversion::F32ToBF16, in, out, count);
}
void bf16_to_f32(const BFloat16* in, float* out, std::size_t count) {
  convert(Conversion::BF16ToF32, in, out, count);
}

// ---- scalar conversions: the reference semantics of the vector ones ---------

float half_to_float(Half h) {
  const std::uint32_t x = h.bits;
  const std::uint32_t sign = (x & 0x8000u) << 16;
  const std::uint32_t exp = (x >> 10) & 0x1Fu;
  const std::uint32_t mant = x & 0x3FFu;
  std::uint32_t r;
  if (exp == 0x1F) {
    r = 0x7F800000u | (mant << 13) | (mant ? 0x00400000u : 0u);  // Inf, or NaN made quiet
  } else if (exp != 0) {
    r = ((x & 0x7FFFu) << 13) + 0x38000000u;  // rebias 15 -> 127
  } else if (mant == 0) {
    r = 0;
  } else {
    // Subnormal mant * 2^-24: shift the leading 1 up to the implicit bit.
    const int shift = std::countl_zero(mant) - 21;  // 1..10
    r = ((113u - shift) << 23) | (((mant << shift) & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(sign | r);
}

Half float_to_half(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return Half{static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu))};
  if (a >= 0x477FF000u) return Half{static_cast<std::uint16_t>(sign | 0x7C00u)};  // >= 65520: Inf
  if (a >= 0x38800000u) {  // normal f16: rebias, round the 13 dropped bits to nearest-even
    return Half{static_cast<std::uint16_t>(sign | ((a - 0x38000000u + 0xFFFu + ((a >> 13) & 1u)) >> 13))};
  }
  // Subnormal f16 (or zero): count quanta of 2^-24, rounding to nearest-even.
  const std::uint32_t exp = a >> 23;
  const std::uint32_t mant = (a & 0x7FFFFFu) | (exp ? 0x800000u : 0u);
  const int shift = 126 - static_cast<int>(exp ? exp : 1);  // value = mant * 2^-shift quanta, >= 14
  if (shift > 24) return Half{sign};                        // below half a quantum
  std::uint32_t q = mant >> shift;
  const std::uint32_t rem = mant & ((1u << shift) - 1);
  const std::uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return Half{static_cast<std::uint16_t>(sign | q)};
}

float bf16_to_float(BFloat16 b) {
  std::uint32_t r = std::uint32_t{b.bits} << 16;
  if ((r & 0x7FFFFFFFu) > 0x7F800000u) r |= 0x00400000u;  // NaN made quiet
  return std::bit_cast<float>(r);
}

BFloat16 float_to_bf16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return BFloat16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  return BFloat16{static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}

// ---- SIMD targets (tests and benchmarks) ------------------------------------

std::vector<std::int64_t> simd_targets() { return hwy::SupportedAndGeneratedTargets(); }

const char* simd_target_name(std::int64_t target) { return hwy::TargetName(target); }

void force_simd_target(std::int64_t target) { hwy::SetSupportedTargetsForTest(target); }

const char* active_simd_target() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace kolo::kernels

#endif  // HWY_ONCE
