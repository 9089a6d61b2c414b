#include "report.h"

#include <fmt/format.h>

#include <cstdio>

namespace kolo_bench {

namespace {

bool takes_op(Coll c) { return c == Coll::Allreduce || c == Coll::ReduceScatter; }

// nccl-tests' "in place" is meaningful only where the API has that form.
const char* placement(Coll c, bool inplace) {
  if (c == Coll::Broadcast) return "in place";
  if (c == Coll::Barrier) return "no data";
  if (c == Coll::Alltoall) return "out of place (alltoall has no in-place form)";
  return inplace ? "in place" : "out of place";
}

}  // namespace

void Report::begin(Coll c) {
  rows_.clear();
  if (!printing()) return;
  fmt::print("# kolo-bench {}: {} ranks, transport {}, {}, {}{}\n", coll_name(c), comm_.size(),
             comm_.transport(), placement(c, o_.inplace), o_.async ? "async" : "blocking",
             c == Coll::Broadcast ? fmt::format(", root {}", o_.root) : "");
  if (o_.time_budget_s > 0 && o_.warmup > 0)
    fmt::print("# iterations per size: warmup {}, timed max({}, min({}, {:g} s / op time))\n",
               o_.warmup, o_.iters, o_.max_iters, o_.time_budget_s);
  else
    fmt::print("# iterations per size: warmup {}, timed {}\n", o_.warmup, o_.iters);
  fmt::print("#\n# {:>11} {:>12} {:>6} {:>7} {:>7} {:>11} {:>11} {:>11} {:>7}\n", "size(B)",
             "count", "type", "redop", "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  std::fflush(stdout);
}

void Report::row(Coll c, const Result& r) {
  rows_.push_back(r);
  if (!printing()) return;
  const char* type = c == Coll::Barrier ? "-" : kolo::dtype_name(o_.dtype);
  const char* op = takes_op(c) ? kolo::op_name(o_.op) : "none";
  const std::string wrong = r.wrong < 0 ? "N/A" : fmt::format("{}", r.wrong);
  fmt::print("  {:>11} {:>12} {:>6} {:>7} {:>7} {:>11.2f} {:>11.3f} {:>11.3f} {:>7}\n", r.bytes,
             r.count, type, op, r.iters, r.time_us, r.algbw, r.busbw, wrong);
  std::fflush(stdout);
}

bool Report::end(Coll c) {
  bool ok = true;
  double busbw = 0;
  for (const auto& r : rows_) {
    ok &= r.wrong <= 0;
    busbw += r.busbw;
  }
  if (!printing()) return ok;
  if (c != Coll::Barrier && !rows_.empty())
    fmt::print("# avg bus bandwidth: {:.3f} GB/s\n", busbw / rows_.size());
  fmt::print("# {}\n#\n", !o_.check ? "results not checked (--no-check)"
                          : ok      ? "all results correct"
                                    : "WRONG RESULTS (see #wrong)");
  if (o_.anchor_format) {
    // The anchors' line; allreduce keeps their system name so scripts can join them.
    const std::string system =
        c == Coll::Allreduce ? std::string("kolo") : fmt::format("kolo-{}", coll_name(c));
    for (const auto& r : rows_)
      fmt::print("{} n={} bytes={} time_us={:.2f} algbw_GBps={:.3f} busbw_GBps={:.3f}\n", system,
                 comm_.size(), r.bytes, r.time_us, r.algbw, r.busbw);
  }
  std::fflush(stdout);
  return ok;
}

}  // namespace kolo_bench
