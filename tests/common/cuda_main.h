// What the stand-alone CUDA programs (tests/kernels/cuda_reduce_test.cc,
// bench/gpu/reduce_kernel.cc) share: a CUDA call that must succeed, and exit
// code 77 — ctest's "skipped", never "passed" — where no GPU can be used.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace kolo::test {

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

inline void exit_77_without_gpu() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no GPU\n");
    std::exit(77);
  }
}

}  // namespace kolo::test
