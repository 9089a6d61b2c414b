// CUDA reduction across ranks' buffers (reduce_cuda.h). One thread per
// element (grid-stride): each reads element i of every input, in rank order,
// and writes one result — every byte is read once and written once, which is
// all an elementwise reduction can do; the inputs are peers' IPC memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/reduce_cuda.h"

namespace kolo::kernels::cuda {

namespace {

// How an element is accumulated: halves in f32, everything else as itself
// (integers unsigned, so that sums and products wrap as two's complement).
template <class T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <> struct Acc<std::int32_t> { using type = std::uint32_t; };
template <> struct Acc<std::int64_t> { using type = std::uint64_t; };

template <class T> __device__ typename Acc<T>::type load(T x) { return static_cast<typename Acc<T>::type>(x); }
template <> __device__ float load(__half x) { return __half2float(x); }
template <> __device__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class A> __device__ bool is_nan(A x) {
  if constexpr (std::is_floating_point_v<A>) return x != x;
  return false;
}

// Signed comparisons for the integer types accumulated unsigned.
template <class T, class A> __device__ bool less(A a, A b) {
  if constexpr (std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>)
    return static_cast<T>(a) < static_cast<T>(b);
  return a < b;
}

template <class T, class A> __device__ A combine(Op op, A acc, A x) {
  switch (op) {
    case Op::Sum: return acc + x;
    case Op::Product: return acc * x;
    // kernels::reduce's rule: min(acc, x) = (x < acc || isnan(x)) ? x : acc.
    case Op::Min: return (less<T>(x, acc) || is_nan(x)) ? x : acc;
    case Op::Max: return (less<T>(acc, x) || is_nan(x)) ? x : acc;
    default: return acc;
  }
}

template <class T> __device__ T store(typename Acc<T>::type a) {
  if constexpr (std::is_same_v<T, float>) {
    return a != a ? __int_as_float(0x7FC00000) : a;
  } else if constexpr (std::is_same_v<T, double>) {
    return a != a ? __longlong_as_double(0x7FF8000000000000ll) : a;
  } else if constexpr (std::is_same_v<T, __half>) {
    return a != a ? __ushort_as_half(0x7E00) : __float2half_rn(a);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return a != a ? __ushort_as_bfloat16(0x7FC0) : __float2bfloat16_rn(a);
  } else {
    return static_cast<T>(a);
  }
}

template <class T>
__global__ void reduce_kernel(Inputs inputs, T* out, std::size_t count, Op op, int divisor) {
  using A = typename Acc<T>::type;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    A acc = load(static_cast<const T*>(inputs.in[0])[i]);
    for (int r = 1; r < inputs.n; ++r) acc = combine<T>(op, acc, load(static_cast<const T*>(inputs.in[r])[i]));
    if constexpr (std::is_floating_point_v<A>) {
      if (divisor > 0) acc /= static_cast<A>(divisor);
    }
    out[i] = store<T>(acc);
  }
}

template <class T>
cudaError_t launch(const Inputs& inputs, void* out, std::size_t count, Op op, int divisor, cudaStream_t stream) {
  constexpr int kThreads = 256;
  // Enough blocks to fill the GPU several times over; the grid-stride loop does the rest.
  const std::size_t want = (count + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(want < 4096 ? (want == 0 ? 1 : want) : 4096);
  reduce_kernel<T><<<blocks, kThreads, 0, stream>>>(inputs, static_cast<T*>(out), count, op, divisor);
  return cudaGetLastError();
}

}  // namespace

cudaError_t reduce(DType t, Op op, const Inputs& inputs, void* out, std::size_t count, int divisor,
                   cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (t) {
    case DType::F32: return launch<float>(inputs, out, count, op, divisor, stream);
    case DType::F64: return launch<double>(inputs, out, count, op, divisor, stream);
    case DType::F16: return launch<__half>(inputs, out, count, op, divisor, stream);
    case DType::BF16: return launch<__nv_bfloat16>(inputs, out, count, op, divisor, stream);
    case DType::I32: return launch<std::int32_t>(inputs, out, count, op, 0, stream);
    case DType::I64: return launch<std::int64_t>(inputs, out, count, op, 0, stream);
    case DType::U8: return launch<std::uint8_t>(inputs, out, count, op, 0, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kolo::kernels::cuda
