// The ipc plane's CUDA reduction kernel (kernels/reduce_cuda.h) against the
// device's own copy: for each dtype and number of inputs, the time of one
// reduction of 64 MiB per input and the bytes it moves per second (every
// input read once, the output written once), beside cudaMemcpy's
// device-to-device rate (read once, written once); with the kernel's vector
// loads (16 bytes of each input per thread, its default on aligned buffers)
// and with element loads. Tells how close the kernel is to the memory system,
// per dtype.
//
//   build/bench/gpu/reduce_kernel_bench > reduce-kernel.md   (exit 77 without a GPU)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/reduce_cuda.h"
#include "../../tests/common/cuda_main.h"

using namespace kolo;

namespace {

// Median of `reps` timings of fn() (ms), each over `iters` runs.
template <class F>
float median_ms(F fn, int iters = 10, int reps = 5) {
  cudaEvent_t a, b;
  test::cuda_ok(cudaEventCreate(&a), "cudaEventCreate");
  test::cuda_ok(cudaEventCreate(&b), "cudaEventCreate");
  fn();  // warm-up
  std::vector<float> t;
  for (int r = 0; r < reps; ++r) {
    test::cuda_ok(cudaEventRecord(a), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) fn();
    test::cuda_ok(cudaEventRecord(b), "cudaEventRecord");
    test::cuda_ok(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    test::cuda_ok(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.push_back(ms / iters);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return t[t.size() / 2];
}

}  // namespace

int main() {
  test::exit_77_without_gpu();
  cudaDeviceProp prop{};
  test::cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  constexpr std::size_t kBytes = 64u << 20;
  constexpr int kMost = 4;
  std::vector<void*> in(kMost);
  for (auto& p : in) test::cuda_ok(cudaMalloc(&p, kBytes), "cudaMalloc");
  void* out = nullptr;
  test::cuda_ok(cudaMalloc(&out, kBytes), "cudaMalloc");
  for (void* p : in) test::cuda_ok(cudaMemset(p, 0, kBytes), "cudaMemset");

  const float copy_ms = median_ms([&] { test::cuda_ok(cudaMemcpyAsync(out, in[0], kBytes, cudaMemcpyDeviceToDevice), "copy"); });
  const double copy_gbs = 2.0 * kBytes / (copy_ms * 1e-3) / 1e9;
  std::printf("# The CUDA reduction kernel vs the device's copy, %s\n\n", prop.name);
  std::printf("64 MiB per input; GB/s counts every input read once and the output written once "
              "(bench/gpu/reduce_kernel.cc). Device-to-device copy: %.1f µs, %.0f GB/s.\n\n",
              copy_ms * 1e3, copy_gbs);
  std::printf("| dtype | inputs | vector loads µs | GB/s | of the copy's rate | element loads µs | GB/s | vector / element |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F64, DType::I32, DType::U8}) {
    for (int n : {2, 4}) {
      kernels::cuda::Inputs inputs;
      inputs.n = n;
      for (int r = 0; r < n; ++r) inputs.in[r] = in[r];
      const std::size_t count = kBytes / dtype_size(t);
      auto time = [&](kernels::cuda::Loads loads) {
        return median_ms([&] { test::cuda_ok(kernels::cuda::reduce(t, Op::Sum, inputs, out, count, 0, nullptr, loads), "reduce"); });
      };
      const float vec = time(kernels::cuda::Loads::Vector), elem = time(kernels::cuda::Loads::Scalar);
      const double moved = double(n + 1) * kBytes / 1e9;
      std::printf("| %s | %d | %.1f | %.0f | %.0f %% | %.1f | %.0f | %.2f× |\n", dtype_name(t), n, vec * 1e3,
                  moved / (vec * 1e-3), 100 * moved / (vec * 1e-3) / copy_gbs, elem * 1e3, moved / (elem * 1e-3),
                  elem / vec);
    }
  }
  for (void* p : in) cudaFree(p);
  cudaFree(out);
  return 0;
}
