#include "reducer/fusion_copy.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "core/error.h"
#include "kernels/reduce.h"
#include "transport/gpu.h"

namespace kolo::fusion {
namespace {

// Widening to a working type and back: f32 for f32/f16/bf16, f64 for f64
// (an f64 gradient keeps its precision when only scaled).
template <class W>
W load(DType t, const void* p, std::size_t i) {
  switch (t) {
    case DType::F32: return static_cast<W>(static_cast<const float*>(p)[i]);
    case DType::F64: return static_cast<W>(static_cast<const double*>(p)[i]);
    case DType::F16: return static_cast<W>(kernels::half_to_float(static_cast<const Half*>(p)[i]));
    case DType::BF16: return static_cast<W>(kernels::bf16_to_float(static_cast<const BFloat16*>(p)[i]));
    default: fail("fusion buffers hold floating dtypes only, not {}", dtype_name(t));
  }
}

template <class W>
void store(DType t, void* p, std::size_t i, W v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); return;
    case DType::F64: static_cast<double*>(p)[i] = static_cast<double>(v); return;
    case DType::F16: static_cast<Half*>(p)[i] = kernels::float_to_half(static_cast<float>(v)); return;
    case DType::BF16: static_cast<BFloat16*>(p)[i] = kernels::float_to_bf16(static_cast<float>(v)); return;
    default: fail("fusion buffers hold floating dtypes only, not {}", dtype_name(t));
  }
}

template <class W>
void convert_scalar(void* dst, DType dt, const void* src, DType st, std::size_t count, W scale) {
  for (std::size_t i = 0; i < count; ++i) store<W>(dt, dst, i, load<W>(st, src, i) * scale);
}

template <class T>
void scale_same(T* dst, const T* src, std::size_t count, T s) {
  for (std::size_t i = 0; i < count; ++i) dst[i] = src[i] * s;  // vectorised by the compiler
}

bool is_16(DType t) { return t == DType::F16 || t == DType::BF16; }

// f32 <-> f16/bf16 without scaling: the SIMD kernels.
void convert_16(void* dst, DType dt, const void* src, DType st, std::size_t n) {
  if (st == DType::F32 && dt == DType::F16) return kernels::f32_to_f16(static_cast<const float*>(src), static_cast<Half*>(dst), n);
  if (st == DType::F32) return kernels::f32_to_bf16(static_cast<const float*>(src), static_cast<BFloat16*>(dst), n);
  if (st == DType::F16) return kernels::f16_to_f32(static_cast<const Half*>(src), static_cast<float*>(dst), n);
  kernels::bf16_to_f32(static_cast<const BFloat16*>(src), static_cast<float*>(dst), n);
}

void convert_host(void* dst, DType dt, const void* src, DType st, std::size_t count, double scale) {
  if (count == 0) return;
  if (dt == st && scale == 1.0) {
    if (dst != src) std::memcpy(dst, src, count * dtype_size(dt));
    return;
  }
  if (dt == st && dt == DType::F32)
    return scale_same(static_cast<float*>(dst), static_cast<const float*>(src), count, static_cast<float>(scale));
  if (dt == st && dt == DType::F64)
    return scale_same(static_cast<double*>(dst), static_cast<const double*>(src), count, scale);
  if (scale == 1.0 && ((st == DType::F32 && is_16(dt)) || (dt == DType::F32 && is_16(st))))
    return convert_16(dst, dt, src, st, count);
  if (is_16(st) && (dt == st || is_16(dt))) {
    // Through an f32 block: the SIMD conversions, scaled in between.
    constexpr std::size_t kBlock = 4096;
    float tmp[kBlock];
    for (std::size_t at = 0; at < count; at += kBlock) {
      const std::size_t n = std::min(kBlock, count - at);
      const std::size_t es = dtype_size(st), ed = dtype_size(dt);
      convert_16(tmp, DType::F32, static_cast<const char*>(src) + at * es, st, n);
      scale_same(tmp, tmp, n, static_cast<float>(scale));
      convert_16(static_cast<char*>(dst) + at * ed, dt, tmp, DType::F32, n);
    }
    return;
  }
  if (dt == DType::F64 || st == DType::F64) return convert_scalar<double>(dst, dt, src, st, count, scale);
  convert_scalar<float>(dst, dt, src, st, count, static_cast<float>(scale));
}

}  // namespace

void convert(void* dst, DType dt, const void* src, DType st, std::size_t count, double scale,
             const Place& place) {
  if (place.on_host()) return convert_host(dst, dt, src, st, count, scale);
  gpu::convert(dst, dt, src, st, count, scale, place);
}

void zero(void* dst, std::size_t bytes, const Place& place) {
  if (bytes == 0) return;
  if (place.on_host()) {
    std::memset(dst, 0, bytes);
    return;
  }
  gpu::zero(dst, bytes, place);
}

Buffer::Buffer(std::size_t bytes, const Place& place) {
  bytes = std::max<std::size_t>(bytes, 1);
  if (!place.on_host()) {
    data_ = gpu::allocate(bytes, place);
    return;
  }
  // 64-byte aligned (a cache line, any SIMD width), zeroed.
  void* p = ::operator new(bytes, std::align_val_t{64});
  std::memset(p, 0, bytes);
  data_ = std::shared_ptr<void>(p, [](void* q) { ::operator delete(q, std::align_val_t{64}); });
}

}  // namespace kolo::fusion
