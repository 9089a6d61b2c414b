#include "transport/cuda/runtime.h"

#include <cuda.h>

#include <mutex>
#include <thread>

#include "core/config.h"
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

cudaError_t poll(const std::function<cudaError_t()>& done, std::chrono::milliseconds limit,
                 const std::function<void()>& between) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (int polls = 0;; ++polls) {
    const cudaError_t e = done();
    if (e != cudaErrorNotReady) return e;
    if (between) between();
    if (Clock::now() - start > limit) return e;
    if (polls < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
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

void await(const std::function<cudaError_t()>& done, const char* call, const char* what, int device) {
  const cudaError_t e = poll(done, std::chrono::milliseconds(config::timeout_ms()));
  if (e == cudaErrorNotReady)
    fail("{} on cuda:{}: the GPU did not finish kolo's copies and kernels within KOLO_TIMEOUT_MS={} ms (they run "
         "after the work queued on the caller's stream before the collective: does it end?)",
         what, device, config::timeout_ms());
  check(e, call, what, device);
}

}  // namespace

void synchronize(cudaStream_t s, const char* what, int device) {
  await([s] { return cudaStreamQuery(s); }, "cudaStreamQuery", what, device);
}

void synchronize(cudaEvent_t e, const char* what, int device) {
  await([e] { return cudaEventQuery(e); }, "cudaEventQuery", what, device);
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

void quietly_on(int device, const std::function<void()>& fn) noexcept {
  try {
    DeviceScope on(device, "releasing kolo's CUDA resources");
    fn();
  } catch (...) {
  }
  (void)cudaGetLastError();
}

namespace {

// Whether `device` has its primary context (the runtime's) made already.
// Unknown (no such entry point) counts as made.
bool has_context(int device) {
  using Get = CUresult (*)(CUdevice*, int);
  using State = CUresult (*)(CUdevice, unsigned*, int*);
  static const auto get = reinterpret_cast<Get>(driver_function("cuDeviceGet", 2000));
  static const auto state = reinterpret_cast<State>(driver_function("cuDevicePrimaryCtxGetState", 7000));
  CUdevice d = 0;
  unsigned flags = 0;
  int active = 1;
  if (get == nullptr || state == nullptr || get(&d, device) != CUDA_SUCCESS) return true;
  return state(d, &flags, &active) != CUDA_SUCCESS || active != 0;
}

}  // namespace

DeviceScope::~DeviceScope() {
  // Only where it has a context: see runtime.h (hundreds of MiB on GPU 0 per rank otherwise).
  if (previous_ != device_ && has_context(previous_)) (void)cudaSetDevice(previous_);
}

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
