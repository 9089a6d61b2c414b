// Which data plane serves a communicator's collectives on CUDA memory
// (KOLO_GPU_TRANSPORT, core/config.h).
#include <mutex>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "kernels/reduce_cuda.h"
#include "transport/cuda/planes.h"
#include "transport/gpu.h"

namespace kolo::gpu {

namespace {

// "auto" is the host plane until the ipc and nccl planes have been seen
// working on a GPU (docs/gpus.md: no GPU has run them yet).
PlaneCode choose(int size, bool one_host) {
  const std::string want = config::gpu_transport();
  if (want == "auto" || want == "host") return PlaneCode::Host;
  if (want == "ipc") {
    if (!one_host)
      fail("KOLO_GPU_TRANSPORT=ipc needs every rank of the communicator on one host (CUDA IPC does not "
           "cross hosts); use host or auto");
    if (size > kernels::cuda::kMaxInputs)
      fail("KOLO_GPU_TRANSPORT=ipc serves at most {} ranks on a host, this communicator has {}; use host or auto",
           kernels::cuda::kMaxInputs, size);
    return PlaneCode::Ipc;
  }
  if (want == "nccl") {
    // Where NCCL cannot be loaded the host plane serves, and says why (once).
    std::string why;
    if (nccl::library(why) != nullptr) return PlaneCode::Nccl;
    static std::once_flag said;
    std::call_once(said, [&] { kolo::log(LogLevel::Warn, "KOLO_GPU_TRANSPORT=nccl: {}; the host plane serves", why); });
    return PlaneCode::Host;
  }
  fail("KOLO_GPU_TRANSPORT={} is not a data plane (auto, host, ipc, nccl)", want);
}

}  // namespace

std::unique_ptr<Plane> make_plane(int size, bool one_host, Farewell farewell) {
  const PlaneCode plane = choose(size, one_host);
  if (plane == PlaneCode::Ipc) return make_ipc_plane(size, std::move(farewell));
  if (plane == PlaneCode::Nccl) {
    std::string why;
    return make_nccl_plane(*nccl::library(why), size, make_host_plane());
  }
  return make_host_plane();
}

std::string planned_plane(int size, bool one_host) { return plane_name(choose(size, one_host)); }

}  // namespace kolo::gpu
