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

namespace {

// The driver's function `name` as CUDA `version` defined it, or null.
void* driver_function(const char* name, int version) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

}  // namespace

WaitValue32 wait_value32() {
  // As CUDA 12.0 defined it (cuStreamWaitValue32_v2).
  static const auto fn = reinterpret_cast<WaitValue32>(driver_function("cuStreamWaitValue32", 12000));
  return fn;
}

bool allocation_of(const void* p, Allocation* a) {
  using GetAttributes = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);
  static const auto fn = reinterpret_cast<GetAttributes>(driver_function("cuPointerGetAttributes", 7000));
  if (fn == nullptr) return false;
  CUdeviceptr start = 0;
  unsigned long long id = 0;
  int ipc = 0;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                 CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  void* into[] = {&start, &id, &ipc};
  // Unlike cuPointerGetAttribute, this one reports a pointer the driver does
  // not know by leaving the values as they were, not by an error.
  if (fn(3, which, into, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS || start == 0) return false;
  a->base = reinterpret_cast<const char*>(start);
  a->id = id;
  a->legacy_ipc = ipc != 0;
  return true;
}

}  // namespace kolo::gpu::cuda
