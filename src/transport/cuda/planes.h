// The data planes for CUDA memory (transport/gpu.h), made by make_plane().
#pragma once

#include <cstddef>
#include <memory>

#include "transport/cuda/nccl_library.h"
#include "transport/gpu.h"

namespace kolo::gpu {

// Blocks of staging memory and inbox sections start this many bytes apart:
// cudaMalloc's alignment, at which copies and kernels run fastest.
inline constexpr std::size_t kAlign = 256;

// Device memory staged through pinned host memory around the host transport.
std::unique_ptr<Plane> make_host_plane();
// Ranks of one host reading each other's device memory through CUDA IPC
// (at most kernels::cuda::kMaxInputs ranks); its inbox is freed after `farewell`.
std::unique_ptr<Plane> make_ipc_plane(int size, Farewell farewell);
// NCCL for ranks that each own a GPU; what it does not do as kolo does goes to `host`.
std::unique_ptr<Plane> make_nccl_plane(const nccl::Library& lib, int size, std::unique_ptr<Plane> host);

}  // namespace kolo::gpu
