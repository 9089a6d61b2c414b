// The CUDA runtime as kolo's GPU parts use it: every call checked, its error
// a kolo::Error that names the rank (fail()), the collective, the device and
// CUDA's own message.
//
// kolo links the CUDA runtime statically (cudart_static): it opens the driver
// only when a CUDA call is made, so a program that never hands kolo device
// memory runs on a machine without a GPU or driver, and no kolo build needs
// one. The driver's own functions (stream memory operations) are taken
// through cudaGetDriverEntryPointByVersion for the same reason: no -lcuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kolo::gpu::cuda {

// Throws kolo::Error "<what> on cuda:<device>: <call> failed: <message>
// (<error name>)" unless err is cudaSuccess.
void check(cudaError_t err, const char* call, const char* what, int device);
#define KOLO_CUDA_CHECK(call, what, device) ::kolo::gpu::cuda::check((call), #call, (what), (device))

// Makes `device` the calling thread's current device for the scope and puts
// the caller's back after it (a framework's thread relies on its own). On
// kolo's own threads use set_device(): putting device 0 back would create a
// context on GPU 0 in every rank (cudaSetDevice initialises it).
class DeviceScope {
 public:
  DeviceScope(int device, const char* what);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  int device_;
};

// Makes `device` the calling thread's current device (kolo's engine thread).
void set_device(int device, const char* what);

// cuStreamWaitValue32 (the stream waits on the GPU until the 32-bit word at
// `addr` passes `value`, cyclically: (int32_t)(*addr - value) >= 0), or null
// when the driver does not offer it.
using WaitValue32 = int (*)(cudaStream_t stream, std::uintptr_t addr, std::uint32_t value, unsigned flags);
WaitValue32 wait_value32();
inline constexpr unsigned kWaitGeq = 0x0;  // CU_STREAM_WAIT_VALUE_GEQ

// The device allocation that holds a pointer, as the driver knows it
// (cuPointerGetAttributes).
struct Allocation {
  const char* base = nullptr;   // where it starts
  std::uint64_t id = 0;         // unique among this process's allocations, ever
  bool legacy_ipc = false;      // cudaIpcGetMemHandle can export it (cudaMalloc'd,
                                // not a pool's, not a cuMemCreate mapping)
};
// False where the driver does not say (no such entry point, not device memory).
bool allocation_of(const void* p, Allocation* a);

}  // namespace kolo::gpu::cuda
