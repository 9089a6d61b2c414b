// The CUDA reduction kernel (kernels/reduce_cuda.h) against the host kernels
// (kernels/reduce.h), bit for bit: every dtype x op x number of inputs x size,
// with and without a divisor, on random bit patterns (NaNs with payloads,
// infinities, signed zeros, subnormals) as well as ordinary values; with the
// kernel's vector loads (aligned buffers, and counts that leave a tail) and
// its element loads (forced, or pointers off the 16-byte alignment), out of
// place and in place (the output one of the inputs, as the ipc plane's
// sharded allreduce reduces). And the reducer's CUDA conversion kernel
// (kernels/convert_cuda.h) against its host twin (reducer/fusion_copy.h):
// every pair of floating dtypes, scaled and not, bit for bit (any NaN for a
// NaN: the two sides keep different payloads). Needs a GPU: exit code 77
// (ctest: skipped) where none can be used.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/convert_cuda.h"
#include "kernels/reduce.h"
#include "kernels/reduce_cuda.h"
#include "reducer/fusion_copy.h"
#include "../common/cuda_main.h"

using namespace kolo;

namespace {

int g_failed = 0, g_passed = 0;

// Random elements of t: 1 in 8 a random bit pattern, else a small value (so
// that products of 16 stay finite and sums do not all overflow).
void fill(DType t, std::vector<unsigned char>& bytes, std::size_t count, std::mt19937_64& rng) {
  const std::size_t es = dtype_size(t);
  bytes.resize(count * es);
  std::uniform_real_distribution<float> small(-2.0f, 2.0f);
  for (std::size_t i = 0; i < count; ++i) {
    unsigned char* p = bytes.data() + i * es;
    const std::uint64_t r = rng();
    if (rng() % 8 == 0 || t == DType::I32 || t == DType::I64 || t == DType::U8) {
      std::memcpy(p, &r, es);
      continue;
    }
    const float v = small(rng);
    if (t == DType::F32) std::memcpy(p, &v, 4);
    if (t == DType::F64) { const double d = v; std::memcpy(p, &d, 8); }
    if (t == DType::F16) { const Half h = kernels::float_to_half(v); std::memcpy(p, &h, 2); }
    if (t == DType::BF16) { const BFloat16 b = kernels::float_to_bf16(v); std::memcpy(p, &b, 2); }
  }
}

// Where the buffers lie: each at the start of its allocation, each one
// element past it (no longer 16-byte aligned: element loads), or the output
// being input 0.
enum class Layout { Aligned, Shifted, InPlace };
const char* layout_name(Layout l) {
  return l == Layout::Aligned ? "aligned" : l == Layout::Shifted ? "shifted" : "in place";
}

void check(DType t, Op op, int n, std::size_t count, int divisor, std::mt19937_64& rng,
           Layout layout = Layout::Aligned, kernels::cuda::Loads loads = kernels::cuda::Loads::Vector) {
  const std::size_t bytes = count * dtype_size(t);
  const std::size_t shift = layout == Layout::Shifted ? dtype_size(t) : 0;
  std::vector<std::vector<unsigned char>> in(n);
  std::vector<const void*> host_in(n);
  kernels::cuda::Inputs dev_in;
  dev_in.n = n;
  std::vector<void*> dev(n);
  for (int r = 0; r < n; ++r) {
    fill(t, in[r], count, rng);
    host_in[r] = in[r].data();
    test::cuda_ok(cudaMalloc(&dev[r], bytes + shift + 1), "cudaMalloc");
    test::cuda_ok(cudaMemcpy(static_cast<char*>(dev[r]) + shift, in[r].data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    dev_in.in[r] = static_cast<char*>(dev[r]) + shift;
  }
  std::vector<unsigned char> want(bytes), got(bytes);
  kernels::reduce(t, op, want.data(), host_in.data(), n, count, divisor);
  void* allocated = nullptr;
  if (layout != Layout::InPlace) test::cuda_ok(cudaMalloc(&allocated, bytes + shift + 1), "cudaMalloc");
  void* out = layout == Layout::InPlace ? const_cast<void*>(dev_in.in[0]) : static_cast<char*>(allocated) + shift;
  test::cuda_ok(kernels::cuda::reduce(t, op, dev_in, out, count, divisor, nullptr, loads), "reduce");
  test::cuda_ok(cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  if (std::memcmp(got.data(), want.data(), bytes) == 0) {
    ++g_passed;
  } else {
    std::size_t i = 0;
    while (std::memcmp(got.data() + i * dtype_size(t), want.data() + i * dtype_size(t), dtype_size(t)) == 0) ++i;
    ++g_failed;
    std::fprintf(stderr, "FAILED %s %s n=%d count=%zu divisor=%d %s%s: first difference at element %zu\n",
                 dtype_name(t), op_name(op), n, count, divisor, layout_name(layout),
                 loads == kernels::cuda::Loads::Scalar ? ", element loads" : "", i);
  }
  for (void* p : dev) test::cuda_ok(cudaFree(p), "cudaFree");
  if (allocated != nullptr) test::cuda_ok(cudaFree(allocated), "cudaFree");
}

bool is_nan(DType t, const unsigned char* p) {
  switch (t) {
    case DType::F32: { float v; std::memcpy(&v, p, 4); return v != v; }
    case DType::F64: { double v; std::memcpy(&v, p, 8); return v != v; }
    case DType::F16: { Half h; std::memcpy(&h, p, 2); const float v = kernels::half_to_float(h); return v != v; }
    default: { BFloat16 b; std::memcpy(&b, p, 2); const float v = kernels::bf16_to_float(b); return v != v; }
  }
}

void check_convert(DType dt, DType st, std::size_t count, double scale, std::mt19937_64& rng) {
  std::vector<unsigned char> in;
  fill(st, in, count, rng);
  const std::size_t ed = dtype_size(dt);
  std::vector<unsigned char> want(count * ed), got(count * ed);
  fusion::convert(want.data(), dt, in.data(), st, count, scale, Place::host());
  void *src = nullptr, *dst = nullptr;
  test::cuda_ok(cudaMalloc(&src, in.size()), "cudaMalloc");
  test::cuda_ok(cudaMalloc(&dst, got.size()), "cudaMalloc");
  test::cuda_ok(cudaMemcpy(src, in.data(), in.size(), cudaMemcpyHostToDevice), "cudaMemcpy");
  test::cuda_ok(kernels::cuda::convert(dst, dt, src, st, count, scale, nullptr), "convert");
  test::cuda_ok(cudaMemcpy(got.data(), dst, got.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  std::size_t i = 0;
  while (i < count && (std::memcmp(got.data() + i * ed, want.data() + i * ed, ed) == 0 ||
                       (is_nan(dt, got.data() + i * ed) && is_nan(dt, want.data() + i * ed))))
    ++i;
  if (i == count) {
    ++g_passed;
  } else {
    ++g_failed;
    std::fprintf(stderr, "FAILED convert %s -> %s count=%zu scale=%g: first difference at element %zu\n",
                 dtype_name(st), dtype_name(dt), count, scale, i);
  }
  test::cuda_ok(cudaFree(src), "cudaFree");
  test::cuda_ok(cudaFree(dst), "cudaFree");
}

}  // namespace

int main() {
  test::exit_77_without_gpu();
  std::mt19937_64 rng(0x6b6f6c6f);
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8})
    for (Op op : {Op::Sum, Op::Min, Op::Max, Op::Product})
      for (int n : {1, 2, 3, 8, kernels::cuda::kMaxInputs})
        for (std::size_t count : {std::size_t(1), std::size_t(1000), std::size_t((1 << 20) + 7)})
          for (int divisor : {0, n}) {
            const bool floating = t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
            if (divisor > 0 && !floating) continue;
            check(t, op, n, count, divisor, rng);
          }
  // The other ways in, on sizes with a tail after the last whole vector.
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8})
    for (Op op : {Op::Sum, Op::Max})
      for (int n : {2, 3})
        for (std::size_t count : {std::size_t(1003), std::size_t(65543)}) {
          check(t, op, n, count, 0, rng, Layout::Shifted);
          check(t, op, n, count, 0, rng, Layout::InPlace);
          check(t, op, n, count, 0, rng, Layout::Aligned, kernels::cuda::Loads::Scalar);
        }
  for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (DType st : {DType::F32, DType::F64, DType::F16, DType::BF16})
      for (double scale : {1.0, 0.5, 1.0 / 3.0})
        check_convert(dt, st, 100003, scale, rng);
  std::printf("cuda reduce and convert kernels: %d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
