// Per-SIMD-target element codecs for the reduction and conversion kernels:
// how a vector of compute lanes is loaded from and stored to an array of the
// element type. Included once per target by reduce.cc (Highway's
// foreach_target mechanism), hence the toggling include guard.
//
// Native types are computed in their own lanes. f16 and bf16 are computed in
// f32 lanes: a load promotes N 16-bit elements to one f32 vector, a store
// rounds one f32 vector to nearest-even and writes N 16-bit elements. The
// conversions are written so that every target gives the bits of the scalar
// reference (reduce.cc: half_to_float & co.); in particular Highway 1.0.3's
// own bf16 demotion truncates, and its f16 fallback without F16C mishandles
// rounding, Inf and NaN, so only the F16C instructions are taken from it.

#if defined(KOLO_KERNELS_CODEC_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KOLO_KERNELS_CODEC_INL_H_
#undef KOLO_KERNELS_CODEC_INL_H_
#else
#define KOLO_KERNELS_CODEC_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kolo::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// F16C (AVX2 and AVX-512 targets) converts f16 in hardware, with the same
// results as the integer code below: round to nearest-even, NaN quieted with
// its payload kept (truncated to 10 bits on the way down).
#undef KOLO_KERNELS_HAVE_F16C
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
#define KOLO_KERNELS_HAVE_F16C 1
#else
#define KOLO_KERNELS_HAVE_F16C 0
#endif

// ---- bf16 <-> f32 -----------------------------------------------------------

// Exact: bf16 is the upper half of an f32. NaNs keep their bits (the reduce
// kernels canonicalise NaN results anyway; the converter quiets them).
template <class DF>
HWY_INLINE hn::Vec<DF> PromoteBF16(DF df, hn::Vec<hn::Rebind<uint16_t, DF>> h) {
  const hn::RebindToUnsigned<DF> du;
  return hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, h)));
}

// Round to nearest-even with integer ops: adding 0x7FFF plus the lowest kept
// bit carries into the kept half exactly when the dropped half is above the
// tie, or at the tie with an odd kept half. Overflow carries into the
// exponent and gives Inf, as it should. NaN: keep the upper payload bits and
// set the quiet bit (rounding could otherwise turn a NaN into Inf).
template <class DF>
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> DemoteBF16(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> d16;
  const auto u = hn::BitCast(du, v);
  const auto upper = hn::ShiftRight<16>(u);
  const auto rounded =
      hn::ShiftRight<16>(hn::Add(hn::Add(u, hn::Set(du, 0x7FFFu)), hn::And(upper, hn::Set(du, 1u))));
  const auto quiet_nan = hn::Or(upper, hn::Set(du, 0x0040u));
  const auto r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet_nan, rounded);
  return hn::DemoteTo(d16, hn::BitCast(di, r));  // every lane is <= 0xFFFF: no saturation
}

// ---- f16 <-> f32 ------------------------------------------------------------

template <class DF>
HWY_INLINE hn::Vec<DF> PromoteF16(DF df, hn::Vec<hn::Rebind<uint16_t, DF>> h) {
#if KOLO_KERNELS_HAVE_F16C
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::BitCast(dh, h));
#else
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto x = hn::PromoteTo(du, h);
  const auto sign = hn::ShiftLeft<16>(hn::And(x, hn::Set(du, 0x8000u)));
  const auto exp = hn::And(x, hn::Set(du, 0x7C00u));
  const auto mant = hn::And(x, hn::Set(du, 0x03FFu));
  // Normal: rebias the exponent from 15 to 127.
  const auto normal = hn::Add(hn::ShiftLeft<13>(hn::And(x, hn::Set(du, 0x7FFFu))),
                              hn::Set(du, 0x38000000u));
  // Subnormal (and zero): mant * 2^-24, exact in f32.
  const auto sub = hn::BitCast(
      du, hn::Mul(hn::ConvertTo(df, hn::BitCast(di, mant)), hn::Set(df, 1.0f / 16777216.0f)));
  // Inf / NaN (NaN quieted, as F16C does).
  const auto quiet = hn::IfThenZeroElse(hn::RebindMask(du, hn::Eq(mant, hn::Zero(du))),
                                        hn::Set(du, 0x00400000u));
  const auto special =
      hn::Or(hn::Or(hn::Set(du, 0x7F800000u), hn::ShiftLeft<13>(mant)), quiet);
  auto r = hn::IfThenElse(hn::RebindMask(du, hn::Eq(exp, hn::Zero(du))), sub, normal);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Eq(exp, hn::Set(du, 0x7C00u))), special, r);
  return hn::BitCast(df, hn::Or(r, sign));
#endif
}

template <class DF>
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, DF>> DemoteF16(DF df, hn::Vec<DF> v) {
  const hn::Rebind<uint16_t, DF> d16;
#if KOLO_KERNELS_HAVE_F16C
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::BitCast(d16, hn::DemoteTo(dh, v));
#else
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto u = hn::BitCast(du, v);
  const auto sign = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 0x8000u));
  const auto a = hn::And(u, hn::Set(du, 0x7FFFFFFFu));
  const auto ai = hn::BitCast(di, a);  // non-negative: signed compares are exact
  // Normal result: rebias 127 -> 15, then round the 13 dropped bits to
  // nearest-even (a carry may bump the exponent, which is right).
  const auto normal = hn::ShiftRight<13>(hn::Add(
      hn::Sub(a, hn::Set(du, 0x38000000u - 0xFFFu)), hn::And(hn::ShiftRight<13>(a), hn::Set(du, 1u))));
  // |v| < 2^-14: adding 0.5 puts the f16 subnormal quantum 2^-24 at the f32
  // ulp of 0.5, so the FPU's round-to-nearest-even does the rounding.
  const auto sub = hn::Sub(hn::BitCast(du, hn::Add(hn::BitCast(df, a), hn::Set(df, 0.5f))),
                           hn::Set(du, 0x3F000000u));
  const auto nan = hn::Or(hn::Set(du, 0x7E00u), hn::And(hn::ShiftRight<13>(a), hn::Set(du, 0x03FFu)));
  auto r = hn::IfThenElse(hn::RebindMask(du, hn::Lt(ai, hn::Set(di, 0x38800000))), sub, normal);
  // From 65520 (half way between 65504 and the next, 65536) up: Inf.
  r = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x477FEFFF))), hn::Set(du, 0x7C00u), r);
  r = hn::IfThenElse(hn::RebindMask(du, hn::Gt(ai, hn::Set(di, 0x7F800000))), nan, r);
  return hn::DemoteTo(d16, hn::BitCast(di, hn::Or(r, sign)));
#endif
}

// ---- codecs -----------------------------------------------------------------
// TS: element type in memory; TC: lane type computed in. Load/Store take
// unaligned pointers; ops on lanes never depend on alignment.

template <typename T>
struct NativeCodec {
  using TS = T;
  using TC = T;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const TS* p) {
    return hn::LoadU(d, p);
  }
  template <class D>
  static HWY_INLINE void Store(D d, hn::Vec<D> v, TS* p) {
    hn::StoreU(v, d, p);
  }
};

struct BF16Codec {
  using TS = uint16_t;
  using TC = float;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const TS* p) {
    return PromoteBF16(d, hn::LoadU(hn::Rebind<uint16_t, D>(), p));
  }
  template <class D>
  static HWY_INLINE void Store(D d, hn::Vec<D> v, TS* p) {
    hn::StoreU(DemoteBF16(d, v), hn::Rebind<uint16_t, D>(), p);
  }
};

struct F16Codec {
  using TS = uint16_t;
  using TC = float;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const TS* p) {
    return PromoteF16(d, hn::LoadU(hn::Rebind<uint16_t, D>(), p));
  }
  template <class D>
  static HWY_INLINE void Store(D d, hn::Vec<D> v, TS* p) {
    hn::StoreU(DemoteF16(d, v), hn::Rebind<uint16_t, D>(), p);
  }
};

}  // namespace kolo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KOLO_KERNELS_CODEC_INL_H_
