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
// A codec moves blocks of 4 compute vectors (4 * Lanes(d) elements) between
// an array of the element type and registers. TS: element type in memory;
// TC: lane type computed in. Pointers may be unaligned.

template <typename T>
struct NativeCodec {
  using TS = T;
  using TC = T;
  template <class D, class V = hn::Vec<D>>
  static HWY_INLINE void LoadBlock(D d, const TS* p, V& a0, V& a1, V& a2, V& a3) {
    const size_t N = hn::Lanes(d);
    a0 = hn::LoadU(d, p);
    a1 = hn::LoadU(d, p + N);
    a2 = hn::LoadU(d, p + 2 * N);
    a3 = hn::LoadU(d, p + 3 * N);
  }
  template <class D, class V = hn::Vec<D>>
  static HWY_INLINE void StoreBlock(D d, V a0, V a1, V a2, V a3, TS* p) {
    const size_t N = hn::Lanes(d);
    hn::StoreU(a0, d, p);
    hn::StoreU(a1, d, p + N);
    hn::StoreU(a2, d, p + 2 * N);
    hn::StoreU(a3, d, p + 3 * N);
  }
};

// 16-bit floats in memory order: each f32 vector is promoted from, and
// demoted to, Lanes(d) consecutive elements.
template <class Promote, class Demote>
struct Contiguous16Codec {
  using TS = uint16_t;
  using TC = float;
  template <class D, class V = hn::Vec<D>>
  static HWY_INLINE void LoadBlock(D d, const TS* p, V& a0, V& a1, V& a2, V& a3) {
    const hn::Rebind<uint16_t, D> d16;
    const size_t N = hn::Lanes(d);
    a0 = Promote()(d, hn::LoadU(d16, p));
    a1 = Promote()(d, hn::LoadU(d16, p + N));
    a2 = Promote()(d, hn::LoadU(d16, p + 2 * N));
    a3 = Promote()(d, hn::LoadU(d16, p + 3 * N));
  }
  template <class D, class V = hn::Vec<D>>
  static HWY_INLINE void StoreBlock(D d, V a0, V a1, V a2, V a3, TS* p) {
    const hn::Rebind<uint16_t, D> d16;
    const size_t N = hn::Lanes(d);
    hn::StoreU(Demote()(d, a0), d16, p);
    hn::StoreU(Demote()(d, a1), d16, p + N);
    hn::StoreU(Demote()(d, a2), d16, p + 2 * N);
    hn::StoreU(Demote()(d, a3), d16, p + 3 * N);
  }
};

struct PromoteF16Fn {
  template <class D, class V16>
  HWY_INLINE hn::Vec<D> operator()(D d, V16 h) const { return PromoteF16(d, h); }
};
struct DemoteF16Fn {
  template <class D>
  HWY_INLINE auto operator()(D d, hn::Vec<D> v) const { return DemoteF16(d, v); }
};
struct PromoteBF16Fn {
  template <class D, class V16>
  HWY_INLINE hn::Vec<D> operator()(D d, V16 h) const { return PromoteBF16(d, h); }
};
struct DemoteBF16Fn {
  template <class D>
  HWY_INLINE auto operator()(D d, hn::Vec<D> v) const { return DemoteBF16(d, v); }
};

using F16Codec = Contiguous16Codec<PromoteF16Fn, DemoteF16Fn>;
using BF16Codec = Contiguous16Codec<PromoteBF16Fn, DemoteBF16Fn>;

// bf16 for the reductions, without any shuffling: a full vector of bf16 read
// as 32-bit lanes holds element 2k in the low half of lane k and 2k+1 in the
// high half. Shifting left by 16 gives the even elements as f32, masking the
// low half gives the odd ones; a store rounds both and merges them back into
// the same places. Every element sees the same arithmetic whatever its lane,
// so results are those of the contiguous codec. NaNs must be canonical
// (0x7FC00000, as Finish makes them) because rounding does not special-case
// NaN here: the canonical NaN rounds to 0x7FC0, other payloads might not.
struct BF16PairCodec {
  using TS = uint16_t;
  using TC = float;
  template <class D, class V = hn::Vec<D>>
  static HWY_INLINE void LoadBlock(D d, const TS* p, V& a0, V& a1, V& a2, V& a3) {
    const hn::RebindToUnsigned<D> du;
    const auto* p32 = reinterpret_cast<const uint32_t*>(p);
    const auto w0 = hn::LoadU(du, p32);
    const auto w1 = hn::LoadU(du, p32 + hn::Lanes(du));
    const auto hi_mask = hn::Set(du, 0xFFFF0000u);
    a0 = hn::BitCast(d, hn::ShiftLeft<16>(w0));
    a1 = hn::BitCast(d, hn::And(w0, hi_mask));
    a2 = hn::BitCast(d, hn::ShiftLeft<16>(w1));
    a3 = hn::BitCast(d, hn::And(w1, hi_mask));
  }
  template <class D, class V = hn::Vec<D>>
  static HWY_INLINE void StoreBlock(D d, V a0, V a1, V a2, V a3, TS* p) {
    const hn::RebindToUnsigned<D> du;
    auto* p32 = reinterpret_cast<uint32_t*>(p);
    hn::StoreU(Merge(du, hn::BitCast(du, a0), hn::BitCast(du, a1)), du, p32);
    hn::StoreU(Merge(du, hn::BitCast(du, a2), hn::BitCast(du, a3)), du, p32 + hn::Lanes(du));
  }

 private:
  // Round to nearest-even as in DemoteBF16: the result is the upper half.
  template <class DU, class VU = hn::Vec<DU>>
  static HWY_INLINE VU Round(DU du, VU u) {
    return hn::Add(hn::Add(u, hn::Set(du, 0x7FFFu)), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)));
  }
  template <class DU, class VU = hn::Vec<DU>>
  static HWY_INLINE VU Merge(DU du, VU even, VU odd) {
    return hn::Or(hn::ShiftRight<16>(Round(du, even)), hn::And(Round(du, odd), hn::Set(du, 0xFFFF0000u)));
  }
};

}  // namespace kolo::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KOLO_KERNELS_CODEC_INL_H_
