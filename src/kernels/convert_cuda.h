// Elementwise copy with a cast between the floating dtypes and a scale, on a
// CUDA stream: the gradient reducer's copies into and out of its fusion
// buffers on the GPU (reducer/fusion_copy.h has the host twin).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kolo/kolo.h"

namespace kolo::kernels::cuda {

// dst[i] = DstType(src[i] * scale), f16/bf16 through f32; dst == src only
// with equal dtypes. Returns the launch's error (cudaSuccess when queued).
cudaError_t convert(void* dst, DType dt, const void* src, DType st, std::size_t count, double scale,
                    cudaStream_t stream);

}  // namespace kolo::kernels::cuda
