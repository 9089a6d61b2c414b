// The reducer's fusion-buffer copies on the GPU (convert_cuda.h): one thread
// per element, grid-stride.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/convert_cuda.h"

namespace kolo::kernels::cuda {

namespace {

template <class T> __device__ float widen(T x) { return static_cast<float>(x); }
template <> __device__ float widen(__half x) { return __half2float(x); }
template <> __device__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ double widen64(T x) { return static_cast<double>(widen(x)); }
__device__ double widen64(double x) { return x; }
template <class T> __device__ T narrow(float x) { return static_cast<T>(x); }
template <> __device__ __half narrow(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 narrow(float x) { return __float2bfloat16_rn(x); }

// As the host's conversion (reducer/fusion_copy.cc), bit for bit: in f32 for
// f32/f16/bf16; in f64 where either side is f64, then rounded once to f32 and
// from there to f16/bf16 — never from f64 straight to a 16-bit type.
template <class D, class S>
__global__ void convert_kernel(D* dst, const S* src, std::size_t n, double scale) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(blockDim.x) * gridDim.x) {
    if constexpr (std::is_same_v<D, double> || std::is_same_v<S, double>) {
      const double v = widen64(src[i]) * scale;
      if constexpr (std::is_same_v<D, double>)
        dst[i] = v;
      else
        dst[i] = narrow<D>(static_cast<float>(v));
    } else {
      dst[i] = narrow<D>(widen(src[i]) * static_cast<float>(scale));
    }
  }
}

template <class D, class S>
cudaError_t launch(void* dst, const void* src, std::size_t n, double scale, cudaStream_t stream) {
  const unsigned threads = 256;
  const std::size_t want = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 4096 ? want : 4096);
  convert_kernel<D, S><<<blocks, threads, 0, stream>>>(static_cast<D*>(dst), static_cast<const S*>(src), n, scale);
  return cudaGetLastError();
}

template <class D>
cudaError_t from(void* dst, const void* src, DType st, std::size_t n, double scale, cudaStream_t s) {
  switch (st) {
    case DType::F32: return launch<D, float>(dst, src, n, scale, s);
    case DType::F64: return launch<D, double>(dst, src, n, scale, s);
    case DType::F16: return launch<D, __half>(dst, src, n, scale, s);
    case DType::BF16: return launch<D, __nv_bfloat16>(dst, src, n, scale, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t convert(void* dst, DType dt, const void* src, DType st, std::size_t count, double scale,
                    cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (dt == st && scale == 1.0)
    return dst == src ? cudaSuccess
                      : cudaMemcpyAsync(dst, src, count * dtype_size(dt), cudaMemcpyDeviceToDevice, stream);
  switch (dt) {
    case DType::F32: return from<float>(dst, src, st, count, scale, stream);
    case DType::F64: return from<double>(dst, src, st, count, scale, stream);
    case DType::F16: return from<__half>(dst, src, st, count, scale, stream);
    case DType::BF16: return from<__nv_bfloat16>(dst, src, st, count, scale, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace kolo::kernels::cuda
