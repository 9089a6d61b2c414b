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
// dst may alias any src exactly; nsrc >= 1.
void reduce(DType t, Op op, void* dst, const void* const* srcs, int nsrc, std::size_t count,
            int divisor = 0);

// In place: data[i] /= divisor (floating types only).
void divide(DType t, void* data, std::size_t count, int divisor);

// Vectorized element conversion between f32 and f16/bf16 (round to nearest even).
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
