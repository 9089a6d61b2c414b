#include "runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "collectives.h"

namespace kolo_bench {

namespace {

// Runs `iters` calls (with --async: all issued, then all awaited) from a common
// start (a barrier) and returns the slowest rank's seconds, so that a rank that
// finishes early cannot make a collective look fast (as nccl-tests does).
double timed(kolo::Communicator& comm, Case& c, int iters, bool async) {
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  if (async) {
    std::vector<kolo::Work> works;
    works.reserve(iters);
    for (int i = 0; i < iters; ++i) works.push_back(c.start(true));
    for (auto& w : works) w.wait();
  } else {
    for (int i = 0; i < iters; ++i) c.start(false);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  comm.allreduce(&s, &s, 1, kolo::DType::F64, kolo::Op::Max);
  return s;
}

// max(-n, min(--max-iters, budget / seconds per op)); the warmup's time is
// already the same on every rank, so is the answer.
int choose_iters(const Options& o, double warmup_s) {
  if (o.time_budget_s <= 0 || o.warmup == 0 || warmup_s <= 0) return o.iters;
  const double per_op = warmup_s / o.warmup;
  const double fit = std::floor(o.time_budget_s / per_op);
  return static_cast<int>(std::clamp(fit, static_cast<double>(o.iters), static_cast<double>(o.max_iters)));
}

}  // namespace

Result run_size(kolo::Communicator& comm, const Options& o, Coll coll, std::size_t bytes) {
  auto c = make_case(coll, comm, o, bytes);
  c->prepare();
  const double warm = o.warmup > 0 ? timed(comm, *c, o.warmup, o.async) : 0.0;

  Result r;
  r.bytes = c->bytes;
  r.count = c->count;
  r.iters = choose_iters(o, warm);
  if (c->idempotent()) c->reset_outputs();  // what the check sees comes from the timed loop
  const double secs = timed(comm, *c, r.iters, o.async);
  r.time_us = secs / r.iters * 1e6;
  r.algbw = secs > 0 ? static_cast<double>(r.bytes) * r.iters / secs / 1e9 : 0;
  r.busbw = r.algbw * bus_factor(coll, comm.size());

  if (o.check) {
    if (!c->idempotent()) {  // the timed loop reduced its own output again and again
      c->prepare();
      kolo::Work w = c->start(o.async);
      if (w.valid()) w.wait();
    }
    std::int64_t wrong = static_cast<std::int64_t>(c->check());
    comm.allreduce(&wrong, &wrong, 1, kolo::DType::I64, kolo::Op::Sum);
    r.wrong = wrong;
  }
  return r;
}

}  // namespace kolo_bench
