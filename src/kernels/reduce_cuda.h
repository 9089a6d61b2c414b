// The reduction kernel of the CUDA IPC plane (transport/cuda/ipc_plane.cc):
// out[i] = in[0][i] op in[1][i] op ... op in[n-1][i], with kernels::reduce's
// semantics exactly (kernels/reduce.h: left to right, f16/bf16 accumulated in
// f32 and rounded to nearest-even once, integer sums and products wrapping,
// NaN results stored as the canonical quiet NaN, the divisor applied before
// the store), so that a collective gives the same bits on the GPU as on the
// host, and every rank, reducing its peers in rank order, the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kolo/kolo.h"

namespace kolo::kernels::cuda {

// The most buffers one kernel reduces: the IPC plane serves up to this many
// ranks on a host (more use the host plane).
inline constexpr int kMaxInputs = 16;

struct Inputs {
  const void* in[kMaxInputs];
  int n = 0;
};

// How a thread loads its elements: 16 bytes of each input at once where every
// pointer is 16-byte aligned (the elements past the last whole 16 bytes one
// at a time), or always one at a time (what bench/gpu/reduce_kernel.cc
// compares against). The results are the same bits either way.
enum class Loads { Vector, Scalar };
// The vector loads' width in bytes: buffers (and the pieces of them callers
// reduce) that start on multiples of it take them.
inline constexpr std::size_t kVectorBytes = 16;

// Queues the reduction of `count` elements on `stream` (op: Sum, Min, Max or
// Product; divisor > 0 divides, floating types only). `out` may be one of the
// inputs. Returns the launch's error (cudaSuccess when queued).
cudaError_t reduce(DType t, Op op, const Inputs& inputs, void* out, std::size_t count, int divisor,
                   cudaStream_t stream, Loads loads = Loads::Vector);

}  // namespace kolo::kernels::cuda
