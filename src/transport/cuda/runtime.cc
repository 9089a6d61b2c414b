#include "transport/cuda/runtime.h"

#include <cuda.h>

#include <mutex>

#include "core/error.h"

namespace kolo::gpu::cuda {

void check(cudaError_t err, const char* call, const char* what, int device) {
  if (err == cudaSuccess) return;
  // The runtime keeps the last error per thread: clear it, so that the next
  // call's check reports the next error, not this one again (sticky errors,
  // which leave the context unusable, come back on every call anyway).
  (void)cudaGetLastError();
  fail("{} on cuda:{}: {} failed: {} ({})", what, device, call, cudaGetErrorString(err), cudaGetErrorName(err));
}

DeviceScope::DeviceScope(int device, const char* what) : device_(device) {
  KOLO_CUDA_CHECK(cudaGetDevice(&previous_), what, device);
  if (previous_ != device) KOLO_CUDA_CHECK(cudaSetDevice(device), what, device);
}

void set_device(int device, const char* what) {
  int now = -1;
  KOLO_CUDA_CHECK(cudaGetDevice(&now), what, device);
  if (now != device) KOLO_CUDA_CHECK(cudaSetDevice(device), what, device);
}

DeviceScope::~DeviceScope() {
  if (previous_ != device_) (void)cudaSetDevice(previous_);
}

WaitValue32 wait_value32() {
  static WaitValue32 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    // The function as CUDA 12.0 defined it (cuStreamWaitValue32_v2).
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return WaitValue32{nullptr};
    }
    return reinterpret_cast<WaitValue32>(p);
  }();
  return fn;
}

}  // namespace kolo::gpu::cuda
