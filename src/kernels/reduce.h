// Vectorized reduction and conversion kernels (Google Highway, runtime
// dispatch to the best SIMD target of the CPU).
//
// Determinism: results depend only on the inputs and the order of srcs, never
// on alignment or on the SIMD target, so that every rank computing the same
// reduction gets the same bits.
#pragma once

#include <cstddef>

#include "kolo/kolo.h"

namespace kolo::kernels {

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i], left to right.
// op is Sum, Min, Max or Product (callers turn Average into Sum + divisor).
// f16/bf16 are accumulated in f32 across all sources and rounded to
// nearest-even once. Integer sums and products wrap (two's complement).
// If divisor > 0 the result is divided by it before it is stored (in f32 for
// f16/bf16, in the type itself for f32/f64; floating types only).
// dst may alias any src exactly (partial overlap is not allowed); nsrc >= 1;
// pointers need no alignment. One pass over memory: every source is read once
// and dst written once.
//
// Floating Min/Max, left to right: min(acc, x) = (x < acc || isnan(x)) ? x : acc
// (max alike), so any NaN input gives NaN and ties such as +0/-0 keep the
// earlier source. Every floating NaN result is stored as the canonical quiet
// NaN (f32 0x7FC00000, f64 0x7FF8000000000000, f16 0x7E00, bf16 0x7FC0), so
// NaN payloads never depend on the ISA. Errors (kolo::Error): nsrc < 1,
// Op::Average, divisor < 0, divisor > 0 with an integer type.
void reduce(DType t, Op op, void* dst, const void* const* srcs, int nsrc, std::size_t count,
            int divisor = 0);

// What reduce() takes for a collective's op: Average is Sum, then a division
// by the number of ranks.
inline Op kernel_op(Op op) { return op == Op::Average ? Op::Sum : op; }
inline int kernel_divisor(Op op, int ranks) { return op == Op::Average ? ranks : 0; }

// In place: data[i] /= divisor (floating types only).
void divide(DType t, void* data, std::size_t count, int divisor);

// Vectorized element conversion between f32 and f16/bf16: round to nearest
// even, overflow to Inf, subnormals exact; a NaN stays NaN, made quiet, with
// the top bits of its payload (as x86 F16C does).
void f32_to_f16(const float* in, Half* out, std::size_t count);
void f16_to_f32(const Half* in, float* out, std::size_t count);
void f32_to_bf16(const float* in, BFloat16* out, std::size_t count);
void bf16_to_f32(const BFloat16* in, float* out, std::size_t count);

// Scalar conversions (reference semantics of the vector ones).
float half_to_float(Half h);
Half float_to_half(float f);
float bf16_to_float(BFloat16 b);
BFloat16 float_to_bf16(float f);

}  // namespace kolo::kernels
