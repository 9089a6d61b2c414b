// kolo-bench's command line: what to run, on which sizes, how often.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "kolo/kolo.h"

namespace kolo_bench {

enum class Coll { Allreduce, Broadcast, Allgather, ReduceScatter, Alltoall, Barrier };

const char* coll_name(Coll c);

struct Options {
  std::vector<Coll> colls;          // in the order they run
  std::vector<std::size_t> sizes;   // message sizes in bytes (see README: what "size" means)
  kolo::DType dtype = kolo::DType::F32;
  kolo::Op op = kolo::Op::Sum;
  int root = 0;
  int iters = 20;                   // minimum timed iterations per size
  int warmup = 5;
  double time_budget_s = 0.2;       // small sizes run more iterations, up to this long
  int max_iters = 10000;
  bool inplace = false;
  bool async = false;
  bool anchor_format = false;
  bool check = true;
};

// Parses argv. On --help (printed by rank 0 of the job only) or a usage error
// (printed by every rank), options is empty and exit_code says how to exit.
struct ParseResult {
  std::optional<Options> options;
  int exit_code = 0;
};
ParseResult parse_options(int argc, char** argv);

// "8", "64K", "256M", "1G" (binary multiples, as nccl-tests); nullopt if malformed.
std::optional<std::size_t> parse_bytes(const std::string& s);

}  // namespace kolo_bench
