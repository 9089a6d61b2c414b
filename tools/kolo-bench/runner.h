// Times one collective at one size: warmup, iteration count, timed loop,
// verification. Every rank runs it; every rank gets the same Result.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kolo/kolo.h"
#include "options.h"

namespace kolo_bench {

struct Result {
  std::size_t bytes = 0, count = 0;
  int iters = 0;
  double time_us = 0;          // slowest rank's elapsed time / iters
  double algbw = 0, busbw = 0;  // GB/s (1e9 bytes)
  std::int64_t wrong = -1;     // mismatches over all ranks; -1: not checked
};

Result run_size(kolo::Communicator& comm, const Options& o, Coll c, std::size_t bytes);

}  // namespace kolo_bench
