// Which data plane serves a communicator's collectives on CUDA memory
// (KOLO_GPU_TRANSPORT, core/config.h).
#include "core/config.h"
#include "core/error.h"
#include "kernels/reduce_cuda.h"
#include "transport/cuda/planes.h"
#include "transport/gpu.h"

namespace kolo::gpu {

namespace {

// "auto" is the host plane until the ipc plane has been seen working on a
// GPU (README "GPUs": no GPU has run it yet).
std::string choose(int size, bool one_host) {
  const std::string want = config::gpu_transport();
  if (want == "auto" || want == "host") return "host";
  if (want == "ipc") {
    if (!one_host)
      fail("KOLO_GPU_TRANSPORT=ipc needs every rank of the communicator on one host (CUDA IPC does not "
           "cross hosts); use host or auto");
    if (size > kernels::cuda::kMaxInputs)
      fail("KOLO_GPU_TRANSPORT=ipc serves at most {} ranks on a host, this communicator has {}; use host or auto",
           kernels::cuda::kMaxInputs, size);
    return "ipc";
  }
  if (want == "nccl")
    fail("KOLO_GPU_TRANSPORT=nccl: kolo's NCCL plane is not built yet; use auto, host or ipc");
  fail("KOLO_GPU_TRANSPORT={} is not a data plane (auto, host, ipc)", want);
}

}  // namespace

std::unique_ptr<Plane> make_plane(int size, bool one_host) {
  return choose(size, one_host) == "ipc" ? make_ipc_plane(size) : make_host_plane();
}

std::string planned_plane(int size, bool one_host) { return choose(size, one_host); }

}  // namespace kolo::gpu
