// kolo::Reducer (include/kolo/reducer.h) as real processes under kolorun,
// against sums computed here from every rank's gradients (each rank can
// compute every other's: they are a function of rank, step and position).
//   layout     buckets of reverse registration order, first cap then cap,
//              a dtype change and an entry above the cap cutting them
//   sums       entries of f32 and f64, handed over in a different order on
//              every rank (shuffled by rank and step), some as zeros, some
//              in place, some through slot(); Average, Sum, prescale and
//              postscale, f16/bf16 compression, 2 backward passes
//   join       Horovod's protocol (the vote in each step) and the explicit
//              vote (kolo_torch's Join): the last rank joins first and
//              shadows; the divisor is the ranks that stepped
//   rebuild    DDP's rebuild after the first step: the layout follows rank
//              0's readiness order on every rank (the others ready in
//              another order), gradients of two dtypes readied interleaved
//              grouped by dtype, results and a slot's values move along (in
//              place and slot() entries included), a slot's old memory stays
//              alive through slot_memory(), reset() goes back and rebuilds
//              again; rebuild off keeps the registration order
//   errors     finish() with a gradient missing; a gradient handed over twice
// Prints "ok" (exit 0) or "FAILED: ..." (exit 3).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "checks.h"
#include "kolo/reducer.h"

namespace {

using namespace reducer_test;  // NOLINT: R, N, failures and check() (checks.h)

// Rank r's gradient element j of entry i at step s.
double grad(int r, int s, std::size_t i, std::size_t j) {
  return std::sin(0.37 * (r + 1) + 0.11 * s + 0.013 * static_cast<double>(i * 131 + j)) * (1 + r);
}

struct Model {
  std::vector<kolo::ReducerEntry> specs;
  std::vector<std::size_t> counts = {3, 700, 5, 40, 1, 300, 9, 2000, 17};
  Model() {
    for (std::size_t i = 0; i < counts.size(); ++i)
      specs.push_back({counts[i], i == 5 || i == 6 ? kolo::DType::F64 : kolo::DType::F32, {}});
  }
};

double value_of(const std::vector<char>& buf, kolo::DType t, std::size_t j) {
  return t == kolo::DType::F64 ? reinterpret_cast<const double*>(buf.data())[j]
                               : reinterpret_cast<const float*>(buf.data())[j];
}
void set_value(std::vector<char>& buf, kolo::DType t, std::size_t j, double v) {
  if (t == kolo::DType::F64) reinterpret_cast<double*>(buf.data())[j] = v;
  else reinterpret_cast<float*>(buf.data())[j] = static_cast<float>(v);
}

// Small caps, so that the model has several buckets.
kolo::ReducerOptions small_caps() {
  kolo::ReducerOptions o;
  o.first_bucket_bytes = 40;
  o.bucket_bytes = 3000;
  return o;
}

// Every `stride`-th element of every entry's result against want(i, j);
// false (a failure named `what` and the step) at the first one off by more
// than tol relative.
template <class Want>
bool results_match(kolo::Reducer& red, const Model& m, int s, std::size_t stride, double tol, Want want,
                   const std::string& what) {
  for (std::size_t i = 0; i < m.specs.size(); ++i) {
    std::vector<char> out(m.counts[i] * kolo::dtype_size(m.specs[i].dtype));
    red.result(i, out.data());
    for (std::size_t j = 0; j < m.counts[i]; j += stride) {
      const double w = want(i, j), got = value_of(out, m.specs[i].dtype, j);
      if (std::abs(got - w) > tol * (1 + std::abs(w))) {
        check(false, what + ": step " + std::to_string(s) + " entry " + std::to_string(i) + "[" + std::to_string(j) +
                         "] = " + std::to_string(got) + ", want " + std::to_string(w));
        return false;
      }
    }
  }
  return true;
}

void layout() {
  Model m;
  kolo::ReducerOptions o;
  o.first_bucket_bytes = 40;  // 10 f32
  o.bucket_bytes = 8000;      // 2000 f32
  kolo::Reducer r(kolo::init(), m.specs, o);
  // Reverse order: 8(17 f32=68 B) alone (past the first cap), then 7 (8000 B,
  // exactly the cap), 6,5 (f64), 4,3,2 (f32: 4+160+20), 1 (2800 B), 0.
  std::vector<std::vector<std::size_t>> want = {{8}, {7}, {6, 5}, {4, 3, 2, 1}, {0}};
  std::vector<std::vector<std::size_t>> got;
  for (std::size_t b = 0; b < r.buckets(); ++b) got.push_back(r.bucket(b));
  // 4,3,2 = 184 B, + 1 (2800 B) = 2984 <= 8000; + 0 = 2996 still: one bucket.
  want = {{8}, {7}, {6, 5}, {4, 3, 2, 1, 0}};
  check(got == want, "layout: buckets differ from reverse order cut at cap and dtype");
  kolo::ReducerOptions none = o;
  none.bucket_bytes = 0;
  kolo::Reducer alone(kolo::init(), m.specs, none);
  check(alone.buckets() == m.specs.size(), "layout: a threshold of 0 fuses nothing");
}

struct Case {
  const char* name;
  kolo::Op op = kolo::Op::Average;
  double prescale = 1.0, postscale = 1.0;
  kolo::Wire wire = kolo::Wire::Same;
  int passes = 1;
  double tol = 1e-5;
};

void sums(kolo::Communicator& comm, const Case& c) {
  Model m;
  kolo::ReducerOptions o = small_caps();
  o.op = c.op;
  o.prescale = c.prescale;
  o.postscale = c.postscale;
  o.wire = c.wire;
  o.passes = c.passes;
  kolo::Reducer red(comm, m.specs, o);
  const std::size_t n = m.specs.size();
  for (int s = 0; s < 3; ++s) {
    std::vector<std::vector<char>> g(n);
    for (std::size_t i = 0; i < n; ++i) g[i].resize(m.counts[i] * kolo::dtype_size(m.specs[i].dtype));
    // Entry 2 is a zero gradient on every rank in step 1 (a parameter unused).
    auto zero = [&](std::size_t i) { return s == 1 && i == 2; };
    std::vector<std::size_t> order(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), std::mt19937(1000 * R + s));
    for (int pass = 1; pass <= c.passes; ++pass)
      for (std::size_t i : order) {
        // Each pass adds grad / passes: the step's gradient is grad().
        for (std::size_t j = 0; j < m.counts[i]; ++j)
          set_value(g[i], m.specs[i].dtype, j,
                    (pass == 1 ? 0.0 : value_of(g[i], m.specs[i].dtype, j)) + grad(R, s, i, j) / c.passes);
        auto a = red.arrived(i);
        check(a == (pass == c.passes ? kolo::Reducer::Arrival::Final : kolo::Reducer::Arrival::Accumulate),
              std::string(c.name) + ": arrival kind");
        if (a != kolo::Reducer::Arrival::Final) continue;
        if (zero(i)) {
          red.ready(i, nullptr);
        } else if (i == 3 && c.wire == kolo::Wire::Same) {  // kept in the bucket (a gradient view)
          auto* slot = static_cast<char*>(red.slot(i));
          std::copy(g[i].begin(), g[i].end(), slot);
          red.ready(i, slot);
        } else {
          red.ready(i, g[i].data(), /*in_place=*/true);
        }
      }
    check(red.unready().empty(), std::string(c.name) + ": entries left unready");
    check(red.arrived(0) == kolo::Reducer::Arrival::Extra, std::string(c.name) + ": an extra pass");
    red.finish();
    auto want = [&](std::size_t i, std::size_t j) {
      double w = 0;
      for (int r = 0; r < N; ++r) {
        const double x = zero(i) ? 0.0 : grad(r, s, i, j) * c.prescale;
        w = r == 0 ? x : c.op == kolo::Op::Max ? std::max(w, x) : w + x;
      }
      return (c.op == kolo::Op::Average ? w / N : w) * c.postscale;
    };
    if (!results_match(red, m, s, 1, c.tol, want, c.name)) return;
  }
}

// The last rank has no data from step `stop` on; the others step 3 times.
void join(kolo::Communicator& comm, bool vote_each_step) {
  Model m;
  kolo::ReducerOptions o = small_caps();
  o.vote_each_step = vote_each_step;
  kolo::Reducer red(comm, m.specs, o);
  const std::size_t n = m.specs.size();
  const int steps = 3, stop = 1, last = N - 1;
  const std::string name = vote_each_step ? "join (vote each step)" : "join (explicit vote)";
  auto stepping = [&](int r, int s) { return r != last || s < stop; };
  for (int s = 0; s < steps; ++s) {
    int active = 0;
    for (int r = 0; r < N; ++r) active += stepping(r, s);
    if (stepping(R, s)) {
      if (!vote_each_step) check(red.vote(true) == active, name + ": vote sum");
      std::vector<std::vector<char>> g(n);
      for (std::size_t i = n; i-- > 0;) {
        g[i].resize(m.counts[i] * kolo::dtype_size(m.specs[i].dtype));
        for (std::size_t j = 0; j < m.counts[i]; ++j) set_value(g[i], m.specs[i].dtype, j, grad(R, s, i, j));
        red.ready(i, g[i].data());
      }
      red.finish();
    } else {
      check(red.vote(false) == active, name + ": the joined rank's vote sum");
      red.shadow();
    }
    check(red.active() == active, name + ": active() " + std::to_string(red.active()));
    auto want = [&](std::size_t i, std::size_t j) {
      double w = 0;
      for (int r = 0; r < N; ++r)
        if (stepping(r, s)) w += grad(r, s, i, j);
      return w / active;
    };
    if (!results_match(red, m, s, 7, 1e-5, want, name)) return;
  }
  if (vote_each_step) check(red.vote(false) == 0, name + ": the final vote");
  red.forget_vote();
}

std::vector<std::vector<std::size_t>> layout_of(const kolo::Reducer& r) {
  std::vector<std::vector<std::size_t>> got;
  for (std::size_t b = 0; b < r.buckets(); ++b) got.push_back(r.bucket(b));
  return got;
}

// Rank 0's readiness order and the layout the rebuild must make of it.
struct Readiness {
  std::string name;
  std::vector<std::size_t> zero_order;
  std::vector<std::vector<std::size_t>> rebuilt;
};

void rebuild(kolo::Communicator& comm, bool on, const Readiness& ready) {
  Model m;
  kolo::ReducerOptions o = small_caps();
  o.rebuild = on;
  kolo::Reducer red(comm, m.specs, o);
  const std::size_t n = m.specs.size();
  const std::string name = (on ? "rebuild, " : "rebuild off, ") + ready.name;
  // Registration order reversed (8..0): 8 alone past the first cap, 7 alone
  // (8000 B), the f64 pair, the rest within 3000 B.
  const std::vector<std::vector<std::size_t>> first = {{8}, {7}, {6, 5}, {4, 3, 2, 1, 0}};
  const std::vector<std::size_t>& zero_order = ready.zero_order;
  const std::vector<std::vector<std::size_t>>& rebuilt = ready.rebuilt;
  check(layout_of(red) == first, name + ": the layout before any step");
  void* slot_before = red.slot(3);
  std::shared_ptr<void> kept = red.slot_memory(3);
  auto step = [&](int s) {
    std::vector<std::size_t> order = zero_order;
    if (R != 0) std::reverse(order.begin(), order.end());  // the others' order does not count
    std::vector<std::vector<char>> g(n);
    for (std::size_t i : order) {
      g[i].resize(m.counts[i] * kolo::dtype_size(m.specs[i].dtype));
      for (std::size_t j = 0; j < m.counts[i]; ++j) set_value(g[i], m.specs[i].dtype, j, grad(R, s, i, j));
      if (i == 3) {  // kept in the bucket (a gradient view)
        auto* slot = static_cast<char*>(red.slot(i));
        std::copy(g[i].begin(), g[i].end(), slot);
        red.ready(i, slot);
      } else {
        red.ready(i, g[i].data(), /*in_place=*/true);
      }
    }
    red.finish();
    auto average = [&](std::size_t i, std::size_t j) {
      double w = 0;
      for (int r = 0; r < N; ++r) w += grad(r, s, i, j);
      return w / N;
    };
    if (!results_match(red, m, s, 1, 1e-5, average, name)) return;
    // The view of entry 3 holds its result (DDP's gradient_as_bucket_view).
    std::vector<char> out(m.counts[3] * sizeof(float));
    red.result(3, out.data());
    check(std::equal(out.begin(), out.end(), static_cast<const char*>(red.slot(3))),
          name + ": step " + std::to_string(s) + ": slot 3 does not hold the result");
  };
  step(0);
  check(layout_of(red) == (on ? rebuilt : first), name + ": the layout after the first step");
  check(red.moves() == (on ? 1u : 0u), name + ": moves() " + std::to_string(red.moves()) + " after the first step");
  check((red.slot(3) != slot_before) == on, name + ": slot 3 moved or not");
  // The old slot's memory is alive (ASan would report a read of freed memory).
  float sum = 0;
  for (std::size_t j = 0; j < m.counts[3]; ++j) sum += static_cast<const float*>(kept.get())[j];
  check(std::isfinite(sum), name + ": the old slot's memory");
  step(1);
  check(layout_of(red) == (on ? rebuilt : first), name + ": the layout after the second step");
  red.reset();
  check(layout_of(red) == first, name + ": reset() returns to the registration order");
  check(red.moves() == (on ? 2u : 0u), name + ": moves() " + std::to_string(red.moves()) + " after reset()");
  step(2);
  check(layout_of(red) == (on ? rebuilt : first), name + ": the layout after reset() and a step");
  check(red.moves() == (on ? 3u : 0u), name + ": moves() " + std::to_string(red.moves()) + " at the end");
}

void errors(kolo::Communicator& comm) {
  Model m;
  kolo::Reducer red(comm, m.specs, {});
  std::vector<float> g(m.counts[0]);
  red.ready(0, g.data());
  bool caught = false;
  try {
    red.ready(0, g.data());
  } catch (const kolo::Error& e) {
    caught = std::string(e.what()).find("twice") != std::string::npos;
  }
  check(caught, "errors: a gradient handed over twice");
  caught = false;
  try {
    red.finish();
  } catch (const kolo::Error& e) {
    caught = std::string(e.what()).find("not handed over") != std::string::npos;
  }
  check(caught, "errors: finish() with gradients missing");
  red.reset();  // nothing was issued: the ranks stay in step
}

}  // namespace

int main() {
  return reducer_test::run([](kolo::Communicator& comm) {
    layout();
    sums(comm, {"average"});
    sums(comm, {"sum", kolo::Op::Sum});
    sums(comm, {"max", kolo::Op::Max});
    sums(comm, {"predivide", kolo::Op::Average, 1.0 / 3, 3.0});
    sums(comm, {"postscale", kolo::Op::Sum, 1.0, 0.5});
    sums(comm, {"fp16", kolo::Op::Average, 1.0, 1.0, kolo::Wire::F16, 1, 2e-3});
    sums(comm, {"bf16", kolo::Op::Average, 1.0, 1.0, kolo::Wire::BF16, 1, 2e-2});
    sums(comm, {"fp16 predivide", kolo::Op::Average, 0.25, 4.0, kolo::Wire::F16, 1, 2e-3});
    sums(comm, {"two passes", kolo::Op::Average, 1.0, 1.0, kolo::Wire::Same, 2});
    if (N > 1) {
      join(comm, true);
      join(comm, false);
    }
    // 0 first (the first cap), 1..4 (2984 B), 7 alone, 8 (past the cap after
    // 7), then the f64 pair.
    const Readiness in_turn{"dtypes in turn", {0, 1, 2, 3, 4, 7, 8, 5, 6}, {{0}, {1, 2, 3, 4}, {7}, {8}, {5, 6}}};
    // The f64 pair interleaved with the f32 entries: the pair completes first
    // (at 6) and goes first, 5 alone past the first cap; 0..4 (2996 B) fill one
    // bucket, not three cut by the pair (DDP keeps a bucket open per dtype).
    const Readiness interleaved{"dtypes interleaved", {0, 5, 1, 6, 2, 3, 4, 7, 8}, {{5}, {6}, {0, 1, 2, 3, 4}, {7}, {8}}};
    for (const Readiness* r : {&in_turn, &interleaved}) {
      rebuild(comm, true, *r);
      rebuild(comm, false, *r);
    }
    errors(comm);
  });
}
