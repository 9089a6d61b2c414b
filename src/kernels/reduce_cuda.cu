// CUDA reduction across ranks' buffers (reduce_cuda.h). Grid-stride: a thread
// reads its elements of every input, in rank order, and writes their results —
// every byte is read once and written once, which is all an elementwise
// reduction can do; the inputs are peers' IPC memory. Where every pointer is
// 16-byte aligned a thread takes 16 bytes of each input at once (one vector
// load: 4 f32, 8 bf16, 16 u8), else one element; the arithmetic per element
// is the same, and so are the bits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

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

// The same on `vectors` runs of kVectorBytes (one uint4: 16 / sizeof(T) elements) of each input.
template <class T>
__global__ void reduce_vector_kernel(Inputs inputs, T* out, std::size_t vectors, Op op, int divisor) {
  using A = typename Acc<T>::type;
  static_assert(sizeof(uint4) == kVectorBytes);
  constexpr int V = kVectorBytes / sizeof(T);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t v = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors; v += stride) {
    A acc[V];
    uint4 raw = static_cast<const uint4*>(inputs.in[0])[v];
    const T* x = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = load(x[k]);
    for (int r = 1; r < inputs.n; ++r) {
      raw = static_cast<const uint4*>(inputs.in[r])[v];
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] = combine<T>(op, acc[k], load(x[k]));
    }
    uint4 result;
    T* y = reinterpret_cast<T*>(&result);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      if constexpr (std::is_floating_point_v<A>) {
        if (divisor > 0) acc[k] /= static_cast<A>(divisor);
      }
      y[k] = store<T>(acc[k]);
    }
    reinterpret_cast<uint4*>(out)[v] = result;
  }
}

// Enough blocks to fill the GPU several times over; the grid-stride loop does the rest.
unsigned blocks_for(std::size_t items, int threads) {
  const std::size_t want = (items + threads - 1) / threads;
  return static_cast<unsigned>(want < 4096 ? (want == 0 ? 1 : want) : 4096);
}

bool vector_aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kVectorBytes == 0; }

template <class T>
cudaError_t launch(const Inputs& inputs, void* out, std::size_t count, Op op, int divisor, cudaStream_t stream,
                   Loads loads) {
  constexpr int kThreads = 256;
  constexpr std::size_t V = kVectorBytes / sizeof(T);
  bool vector = loads == Loads::Vector && count >= V && vector_aligned(out);
  for (int r = 0; r < inputs.n; ++r) vector = vector && vector_aligned(inputs.in[r]);
  std::size_t done = 0;
  if (vector) {
    const std::size_t vectors = count / V;
    reduce_vector_kernel<T><<<blocks_for(vectors, kThreads), kThreads, 0, stream>>>(inputs, static_cast<T*>(out),
                                                                                   vectors, op, divisor);
    done = vectors * V;
  }
  if (done < count) {  // the elements past the last whole vector (or all of them)
    Inputs rest = inputs;
    for (int r = 0; r < inputs.n; ++r) rest.in[r] = static_cast<const T*>(inputs.in[r]) + done;
    reduce_kernel<T><<<blocks_for(count - done, kThreads), kThreads, 0, stream>>>(rest, static_cast<T*>(out) + done,
                                                                                 count - done, op, divisor);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t reduce(DType t, Op op, const Inputs& inputs, void* out, std::size_t count, int divisor,
                   cudaStream_t stream, Loads loads) {
  if (count == 0) return cudaSuccess;
  switch (t) {
    case DType::F32: return launch<float>(inputs, out, count, op, divisor, stream, loads);
    case DType::F64: return launch<double>(inputs, out, count, op, divisor, stream, loads);
    case DType::F16: return launch<__half>(inputs, out, count, op, divisor, stream, loads);
    case DType::BF16: return launch<__nv_bfloat16>(inputs, out, count, op, divisor, stream, loads);
    case DType::I32: return launch<std::int32_t>(inputs, out, count, op, 0, stream, loads);
    case DType::I64: return launch<std::int64_t>(inputs, out, count, op, 0, stream, loads);
    case DType::U8: return launch<std::uint8_t>(inputs, out, count, op, 0, stream, loads);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kolo::kernels::cuda
