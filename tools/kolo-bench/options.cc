#include "options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "core/config.h"

namespace kolo_bench {

namespace {

constexpr const char* kFooter = R"(Run it under a launcher, e.g.:
  kolorun -np 2 kolo-bench -c allreduce -b 8 -e 256M -f 2 -d f32 -o sum

Sizes are bytes of the whole message, as in nccl-tests: the buffer of allreduce
and broadcast, the gathered output of allgather, the input of reduce_scatter,
each rank's send buffer of alltoall. They are rounded down to whole elements
per rank (at least one).

Iterations: after the warmup, each size runs max(-n, min(--max-iters,
--time-budget / warmup time per op)) timed iterations (the same on every rank),
so small sizes run many more than -n; --time-budget 0 runs exactly -n.
time(us) is the slowest rank's elapsed time divided by the iterations.

Every result is checked against values computed on the host (unless --no-check);
#wrong counts the mismatching elements over all ranks, and kolo-bench exits 1
if any is non-zero.)";

const std::map<std::string, kolo::DType> kTypes = {
    {"f32", kolo::DType::F32},  {"float", kolo::DType::F32}, {"f64", kolo::DType::F64},
    {"double", kolo::DType::F64}, {"f16", kolo::DType::F16}, {"half", kolo::DType::F16},
    {"bf16", kolo::DType::BF16}, {"i32", kolo::DType::I32}, {"int32", kolo::DType::I32},
    {"i64", kolo::DType::I64},  {"int64", kolo::DType::I64}, {"u8", kolo::DType::U8},
    {"uint8", kolo::DType::U8}};

const std::map<std::string, kolo::Op> kOps = {
    {"sum", kolo::Op::Sum},  {"avg", kolo::Op::Average}, {"average", kolo::Op::Average},
    {"min", kolo::Op::Min},  {"max", kolo::Op::Max},     {"prod", kolo::Op::Product},
    {"product", kolo::Op::Product}};

const std::map<std::string, std::vector<Coll>> kColls = {
    {"allreduce", {Coll::Allreduce}},
    {"broadcast", {Coll::Broadcast}},
    {"allgather", {Coll::Allgather}},
    {"reduce_scatter", {Coll::ReduceScatter}},
    {"reducescatter", {Coll::ReduceScatter}},
    {"alltoall", {Coll::Alltoall}},
    {"barrier", {Coll::Barrier}},
    {"all", {Coll::Allreduce, Coll::Broadcast, Coll::Allgather, Coll::ReduceScatter,
             Coll::Alltoall, Coll::Barrier}}};

// Only rank 0 of the job prints --help. Init has not run yet, so look at the
// launchers' variables directly (kolo's own first). Usage errors are printed
// by every rank: a launcher that stops the job at the first rank to exit could
// otherwise cut rank 0 off before it spoke.
bool is_rank0() {
  for (const char* v : {"KOLO_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const auto s = kolo::config::env_var(v)) return *s == "0";
  return true;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string tok;
  std::istringstream in(s);
  while (in >> tok) {
    std::size_t start = 0, comma;
    while ((comma = tok.find(',', start)) != std::string::npos) {
      if (comma > start) out.push_back(tok.substr(start, comma - start));
      start = comma + 1;
    }
    if (start < tok.size()) out.push_back(tok.substr(start));
  }
  return out;
}

}  // namespace

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::Allreduce: return "allreduce";
    case Coll::Broadcast: return "broadcast";
    case Coll::Allgather: return "allgather";
    case Coll::ReduceScatter: return "reduce_scatter";
    case Coll::Alltoall: return "alltoall";
    case Coll::Barrier: return "barrier";
  }
  return "?";
}

std::optional<std::size_t> parse_bytes(const std::string& s) {
  if (s.empty()) return std::nullopt;
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &pos);
  } catch (...) {
    return std::nullopt;
  }
  if (s[0] == '-') return std::nullopt;
  std::string suffix = s.substr(pos);
  if (suffix.size() == 2 && (suffix[1] == 'B' || suffix[1] == 'b')) suffix.pop_back();
  int shift = 0;
  if (suffix.empty()) shift = 0;
  else if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else return std::nullopt;
  if (v > (~0ull >> shift)) return std::nullopt;
  return static_cast<std::size_t>(v << shift);
}

ParseResult parse_options(int argc, char** argv) {
  Options o;
  std::string coll = "allreduce", minb = "8", maxb = "256M", sizes, dtype = "f32", op = "sum";
  std::size_t factor = 2;
  CLI::App app{"kolo-bench: time and verify kolo's collectives over a range of message sizes "
               "(nccl-tests style).",
               "kolo-bench"};
  app.footer(kFooter);
  app.add_option("-c,--collective", coll,
                 "allreduce, broadcast, allgather, reduce_scatter, alltoall, barrier, or all "
                 "(a comma-separated list runs several)")
      ->capture_default_str();
  app.add_option("-b,--minbytes", minb, "Smallest size (K, M, G suffixes)")->capture_default_str();
  app.add_option("-e,--maxbytes", maxb, "Largest size")->capture_default_str();
  app.add_option("-f,--stepfactor", factor, "Multiply the size by this between steps")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{2}, std::size_t{1} << 20));
  app.add_option("--sizes", sizes, "Explicit list of sizes (\"8,4096 1M\"), instead of -b/-e/-f");
  app.add_option("-d,--datatype", dtype, "f32, f64, f16, bf16, i32, i64, u8")->capture_default_str();
  app.add_option("-o,--op", op, "sum, avg, min, max, prod")->capture_default_str();
  app.add_option("-r,--root", o.root, "Root rank of broadcast")->capture_default_str();
  app.add_option("-n,--iters", o.iters, "Minimum timed iterations per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("-w,--warmup_iters", o.warmup, "Untimed iterations per size (their time scales -n up; see below)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--time-budget", o.time_budget_s,
                 "Seconds of timed loop per size that small sizes may scale -n up to (0: exactly -n)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--max-iters", o.max_iters, "Most timed iterations per size")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  app.add_flag("--inplace", o.inplace, "Run in place (alltoall has no in-place form)");
  app.add_flag("--async", o.async, "Issue all timed iterations with *_async, then wait for them");
  app.add_flag("--anchor-format", o.anchor_format,
               "Also print one line per size as the anchors do: kolo n= bytes= time_us= "
               "algbw_GBps= busbw_GBps= (other collectives than allreduce as kolo-<name>)");
  app.add_flag("--check,!--no-check", o.check, "Verify every result (default on)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const bool help = e.get_exit_code() == 0;
    if (!help || is_rank0()) app.exit(e);
    return {std::nullopt, help ? 0 : 2};
  }
  auto usage_error = [&](const std::string& msg) -> ParseResult {
    std::fprintf(stderr, "kolo-bench: %s (see kolo-bench --help)\n", msg.c_str());
    return {std::nullopt, 2};
  };

  for (const auto& name : split_list(coll)) {
    auto it = kColls.find(name);
    if (it == kColls.end()) return usage_error(fmt::format("unknown collective '{}'", name));
    o.colls.insert(o.colls.end(), it->second.begin(), it->second.end());
  }
  if (o.colls.empty()) return usage_error("no collective given");
  auto t = kTypes.find(dtype);
  if (t == kTypes.end()) return usage_error(fmt::format("unknown datatype '{}'", dtype));
  o.dtype = t->second;
  auto p = kOps.find(op);
  if (p == kOps.end()) return usage_error(fmt::format("unknown op '{}'", op));
  o.op = p->second;
  for (Coll c : o.colls)
    if ((c == Coll::Allreduce || c == Coll::ReduceScatter) && !kolo::op_supported(o.dtype, o.op))
      return usage_error(fmt::format("op {} is not defined for {}", kolo::op_name(o.op),
                                     kolo::dtype_name(o.dtype)));

  if (!sizes.empty()) {
    for (const auto& s : split_list(sizes)) {
      auto b = parse_bytes(s);
      if (!b) return usage_error(fmt::format("bad size '{}'", s));
      o.sizes.push_back(*b);
    }
  } else {
    auto lo = parse_bytes(minb), hi = parse_bytes(maxb);
    if (!lo) return usage_error(fmt::format("bad -b size '{}'", minb));
    if (!hi) return usage_error(fmt::format("bad -e size '{}'", maxb));
    if (*lo == 0) return usage_error("-b must be at least 1 byte");
    if (*hi < *lo) return usage_error(fmt::format("-e {} is smaller than -b {}", *hi, *lo));
    for (std::size_t s = *lo; s <= *hi; s *= factor) {
      o.sizes.push_back(s);
      if (s > *hi / factor) break;
    }
  }
  if (o.sizes.empty()) return usage_error("no sizes");
  o.max_iters = std::max(o.max_iters, o.iters);
  return {o, 0};
}

}  // namespace kolo_bench
