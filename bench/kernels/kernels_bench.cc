// Throughput of the reduction and conversion kernels (Google Benchmark).
//
//   kernels_bench [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
//
// Sizes are bytes per buffer. Two rates per row:
//   bytes_per_second  memory traffic: nsrc buffers read + 1 written, in GiB/s
//                     (Google Benchmark's unit, 2^30)
//   payload           bytes of one buffer per second, in GB/s (10^9): the
//                     unit of membw.c's "sum_64MiB_payload" (y += x)
// 64 KiB stays in L2, 1 MiB mostly in L2/L3, 64 MiB streams from DRAM.
// Rates are per CPU second of the benchmark thread, not wall time: on a shared
// machine wall time also counts the time the thread waited for a core.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/reduce.h"
#include "kernels/targets.h"

namespace {

using kolo::DType;
using kolo::Op;

std::vector<std::uint8_t> make_buffer(std::size_t bytes, int seed) {
  std::vector<std::uint8_t> b(bytes);
  // Small positive floats / bf16 (0x3F.. patterns): no Inf or NaN slow paths.
  for (std::size_t i = 0; i < bytes; ++i) b[i] = (i % 2) ? 0x3F : std::uint8_t(seed * 31 + i);
  return b;
}

void set_rates(benchmark::State& state, std::size_t bytes, int nsrc) {
  const double iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(iters * bytes * (nsrc + 1)));
  state.counters["payload"] =
      benchmark::Counter(iters * bytes, benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// reduce(t, Sum) of nsrc buffers of state.range(1) bytes into a separate dst.
void BM_Reduce(benchmark::State& state, DType t) {
  const int nsrc = static_cast<int>(state.range(0));
  const std::size_t bytes = static_cast<std::size_t>(state.range(1));
  const std::size_t count = bytes / kolo::dtype_size(t);
  std::vector<std::vector<std::uint8_t>> bufs;
  std::vector<const void*> srcs;
  for (int s = 0; s < nsrc; ++s) bufs.push_back(make_buffer(bytes, s));
  for (auto& b : bufs) srcs.push_back(b.data());
  std::vector<std::uint8_t> dst = make_buffer(bytes, 99);
  for (auto _ : state) {
    kolo::kernels::reduce(t, Op::Sum, dst.data(), srcs.data(), nsrc, count);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, bytes, nsrc);
}

// reduce(F32, Sum) in place, y = y + x: exactly what membw.c's
// "sum_64MiB_payload" loop does, for a same-run comparison with it.
void BM_ReduceInPlaceF32(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / sizeof(float);
  std::vector<float> x(count, 1.0f), y(count, 2.0f);
  const void* srcs[] = {y.data(), x.data()};
  for (auto _ : state) {
    kolo::kernels::reduce(DType::F32, Op::Sum, y.data(), srcs, 2, count);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, bytes, 2);
}

// The same in place sum as a plain loop, compiled with the project's flags
// (-O2, x86-64 baseline, no dispatch): what the kernel buys over it.
void BM_PlainLoopInPlaceF32(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / sizeof(float);
  std::vector<float> x(count, 1.0f), y(count, 2.0f);
  for (auto _ : state) {
    float* __restrict yp = y.data();
    const float* __restrict xp = x.data();
    for (std::size_t i = 0; i < count; ++i) yp[i] += xp[i];
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, bytes, 2);
}

// f32 -> bf16 of state.range(0) bytes of f32 (traffic: f32 read + bf16 written).
void BM_F32ToBF16(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / sizeof(float);
  std::vector<float> in(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = 1.0f + static_cast<float>(i) * 1e-7f;
  std::vector<kolo::BFloat16> out(count);
  for (auto _ : state) {
    kolo::kernels::f32_to_bf16(in.data(), out.data(), count);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(iters * (bytes + bytes / 2)));
  state.counters["payload"] =
      benchmark::Counter(iters * bytes, benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void ReduceArgs(benchmark::internal::Benchmark* b) {
  for (int nsrc : {2, 8}) {
    for (std::int64_t bytes : {64 << 10, 1 << 20, 64 << 20}) b->Args({nsrc, bytes});
  }
  b->ArgNames({"nsrc", "bytes"});
}

BENCHMARK_CAPTURE(BM_Reduce, f32_sum, DType::F32)->Apply(ReduceArgs);
BENCHMARK_CAPTURE(BM_Reduce, bf16_sum, DType::BF16)->Apply(ReduceArgs);
BENCHMARK_CAPTURE(BM_Reduce, f16_sum, DType::F16)->Apply(ReduceArgs);
BENCHMARK(BM_ReduceInPlaceF32)->ArgName("bytes")->Arg(64 << 10)->Arg(1 << 20)->Arg(64 << 20);
BENCHMARK(BM_PlainLoopInPlaceF32)->ArgName("bytes")->Arg(64 << 10)->Arg(1 << 20)->Arg(64 << 20);
BENCHMARK(BM_F32ToBF16)->ArgName("bytes")->Arg(64 << 10)->Arg(1 << 20)->Arg(64 << 20);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("kolo_simd_target", kolo::kernels::active_simd_target());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
