// Which SIMD target the kernels run on. For tests (every target must give the
// same bits) and benchmarks; the library itself always runs the best one.
#pragma once

#include <cstdint>
#include <vector>

namespace kolo::kernels {

// Targets compiled into the kernels that this CPU supports, best first
// (Highway's HWY_* bits). Call before force_simd_target, which narrows it.
std::vector<std::int64_t> simd_targets();
const char* simd_target_name(std::int64_t target);

// Makes the kernels dispatch to `target` (one of simd_targets()); 0 goes back
// to the best target. Not thread-safe: for tests and benchmarks only.
void force_simd_target(std::int64_t target);

// Name of the target the kernels dispatch to now ("AVX2", "SSE4", "EMU128", ...).
const char* active_simd_target();

}  // namespace kolo::kernels
