// The gradient reducer's fusion buffers in CUDA memory (transport/gpu.h).
#include <cuda_runtime_api.h>

#include "kernels/convert_cuda.h"
#include "transport/cuda/runtime.h"
#include "transport/gpu.h"

namespace kolo::gpu {

namespace {
constexpr const char* kWhat = "a gradient bucket";
cudaStream_t stream_of(const Place& place) { return static_cast<cudaStream_t>(place.stream); }
}  // namespace

std::shared_ptr<void> allocate(std::size_t bytes, const Place& place) {
  cuda::DeviceScope on(place.device, kWhat);
  void* p = nullptr;
  KOLO_CUDA_CHECK(cudaMalloc(&p, bytes), kWhat, place.device);
  std::shared_ptr<void> owned(p, [device = place.device](void* q) {
    cuda::DeviceScope on(device, kWhat);
    (void)cudaFree(q);
  });
  // On the caller's stream: a non-blocking one is not ordered after the legacy
  // stream, where cudaMemset would queue it, and the first copy into the
  // buffer is queued there.
  KOLO_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_of(place)), kWhat, place.device);
  return owned;
}

void convert(void* dst, DType dt, const void* src, DType st, std::size_t count, double scale,
             const Place& place) {
  cuda::DeviceScope on(place.device, kWhat);
  KOLO_CUDA_CHECK(kernels::cuda::convert(dst, dt, src, st, count, scale, stream_of(place)), kWhat,
                  place.device);
}

void zero(void* dst, std::size_t bytes, const Place& place) {
  cuda::DeviceScope on(place.device, kWhat);
  KOLO_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_of(place)), kWhat, place.device);
}

}  // namespace kolo::gpu
