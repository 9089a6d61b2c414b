// The data planes for CUDA memory (transport/gpu.h), made by make_plane().
#pragma once

#include <memory>

#include "transport/gpu.h"

namespace kolo::gpu {

// Device memory staged through pinned host memory around the host transport.
std::unique_ptr<Plane> make_host_plane();
// Ranks of one host reading each other's device memory through CUDA IPC
// (at most kernels::cuda::kMaxInputs ranks).
std::unique_ptr<Plane> make_ipc_plane(int size);

}  // namespace kolo::gpu
