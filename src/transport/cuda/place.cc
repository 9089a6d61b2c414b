// Which memory a collective's buffers are: checked before the collective is
// queued, so that a host pointer passed as CUDA memory (or memory of another
// device) is an error naming the buffer, not a fault inside a copy.
#include <cuda_runtime_api.h>

#include "core/error.h"
#include "transport/gpu.h"

namespace kolo::gpu {

bool built() { return true; }

void check(const char* what, const Place& place, std::initializer_list<Buffer> buffers) {
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("{}: the buffers are CUDA memory (cuda:{}), but no CUDA device can be used in this process: {} ({})",
         what, place.device, cudaGetErrorString(e), cudaGetErrorName(e));
  }
  if (place.device < 0 || place.device >= devices)
    fail("{}: cuda:{} is not a CUDA device of this process ({} visible: cuda:0 to cuda:{})", what, place.device,
         devices, devices - 1);
  for (const Buffer& b : buffers) {
    if (b.bytes == 0) continue;
    cudaPointerAttributes a{};
    if (const cudaError_t e = cudaPointerGetAttributes(&a, b.ptr); e != cudaSuccess) {
      (void)cudaGetLastError();
      fail("{}: cannot tell which memory the {} buffer at {} is: {} ({})", what, b.name, b.ptr,
           cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (a.type == cudaMemoryTypeManaged) continue;  // reachable from every device
    if (a.type != cudaMemoryTypeDevice)
      fail("{}: the {} buffer at {} is host memory, but the call says its buffers are CUDA memory of cuda:{}",
           what, b.name, b.ptr, place.device);
    if (a.device != place.device)
      fail("{}: the {} buffer at {} is memory of cuda:{}, but the call says cuda:{}", what, b.name, b.ptr,
           a.device, place.device);
  }
}

}  // namespace kolo::gpu
