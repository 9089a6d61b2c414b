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

#include <chrono>
#include <cstdint>
#include <functional>

namespace kolo::gpu::cuda {

// Throws kolo::Error "<what> on cuda:<device>: <call> failed: <message>
// (<error name>)" unless err is cudaSuccess.
void check(cudaError_t err, const char* call, const char* what, int device);
#define KOLO_CUDA_CHECK(call, what, device) ::kolo::gpu::cuda::check((call), #call, (what), (device))

// Polls `done` (cudaStreamQuery or cudaEventQuery of kolo's own work) until
// it says the work has finished, and returns what it said last: cudaSuccess,
// CUDA's error, or cudaErrorNotReady once `limit` has passed. A small
// collective's work ends in microseconds: it spins first, then sleeps 50 µs
// between polls. `between` (which may throw) runs after each poll that found
// the work unfinished.
cudaError_t poll(const std::function<cudaError_t()>& done, std::chrono::milliseconds limit,
                 const std::function<void()>& between = {});

// Until everything queued on `s` (or before `e`) has run. Never for ever:
// past KOLO_TIMEOUT_MS it fails, naming `what` and the device — kolo's stream
// waits on the caller's, whose work before the collective may never end.
void synchronize(cudaStream_t s, const char* what, int device);
void synchronize(cudaEvent_t e, const char* what, int device);

// Makes `device` the calling thread's current device for the scope and puts
// the caller's back after it (a framework's thread relies on its own) where
// that device has a context already: cudaSetDevice makes one, and a thread
// that never chose a device reads 0 — the caller's device is then left as
// torch's device guard leaves it. On kolo's own threads use set_device().
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

// fn() with `device` current (DeviceScope: the thread's own device put back
// after), every error ignored and cleared: for the destructors that free
// kolo's CUDA resources, on whichever thread lets a communicator go.
void quietly_on(int device, const std::function<void()>& fn) noexcept;

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
