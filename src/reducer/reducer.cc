// kolo::Reducer (include/kolo/reducer.h): one step's state machine — entries
// readied in any order, buckets issued in order, the join vote, waiting,
// scaling and results —, and the rebuild of the layout from the first step's
// readiness order. The layout is layout.cc's, the copies fusion_copy.cc's,
// the self-tuning of the layout autotune.cc's.
#include "kolo/reducer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "reducer/autotune.h"
#include "reducer/fusion_copy.h"
#include "reducer/layout.h"

namespace kolo {

std::size_t fusion_threshold(std::size_t front_default) {
  const std::int64_t v = config::fusion_threshold();
  if (v < -1) fail("KOLO_FUSION_THRESHOLD (or HOROVOD_FUSION_THRESHOLD) is {}; it must be >= 0 bytes", v);
  return v < 0 ? front_default : static_cast<std::size_t>(v);
}

struct Reducer::Impl {
  // Entries of one dtype and place, consecutive in bucket order: their
  // buckets are slices of one buffer, so a new layout (autotune) moves no
  // entry, and slot() stays where a front keeps its gradient.
  struct Run {
    fusion::Buffer buffer;   // wire dtype: what is reduced
    fusion::Buffer staging;  // entry dtype, where wire != dtype and slot() was asked for
  };
  struct Entry {
    ReducerEntry spec;
    std::size_t run = 0;
    std::size_t run_offset = 0;  // elements into the run
    std::size_t bucket = 0;
    std::size_t offset = 0;  // elements into the bucket
    int arrivals = 0;        // this step's
    bool ready = false;
  };
  struct Bucket {
    std::vector<std::size_t> entries;
    std::size_t count = 0;
    DType dtype = DType::F32;  // the entries'
    DType wire = DType::F32;
    Place place;
    std::size_t run = 0, start = 0;  // its slice of runs[run]: elements from start
    void* buffer = nullptr;          // runs[run].buffer at start
    // This step:
    std::size_t pending = 0;
    void* target = nullptr;  // what is reduced: buffer, or an entry's gradient in place
    Work work;
    std::int64_t t_issue = 0;  // timeline
    std::size_t wire_bytes() const { return count * dtype_size(wire); }
  };

  Communicator comm;
  ReducerOptions o;
  Op wire_op = Op::Sum;
  std::vector<Entry> entries;
  std::vector<std::size_t> order;  // the sequence runs and buckets are cut from (layout.h)
  std::uint64_t moves = 0;         // times the runs were laid out anew (slot() moved)
  bool rebuild_armed = false;      // the readiness rebuild is still to come
  std::vector<std::size_t> observed;  // while armed: this step's entries in the order they were readied
  std::vector<Bucket> buckets;
  std::vector<Run> runs;
  std::unique_ptr<fusion::Autotune> tune;  // KOLO_AUTOTUNE
  bool relayout = false;  // tune's cap changed: lay out anew when the next step begins
  std::chrono::steady_clock::time_point last_end{};  // tune: the last step's end

  mutable std::mutex mu;
  std::size_t next = 0;     // the next bucket to issue
  std::size_t readied = 0;  // entries ready this step
  std::int32_t vote_value = 0;  // the step's vote, reduced in place
  Work vote_work;
  int voted = 0;        // vote()'s sum, the divisor until forget_vote(); 0: none
  int last_active = 0;  // the last finished step's divisor
  bool has_results = false;
  std::int64_t t_first = 0;  // timeline: the step's first gradient; 0: not recording
  std::int64_t t_finish = 0;  // timeline: the front's synchronize began (begin_finish())

  template <class... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}: {}", o.what, fmt::format(f, std::forward<Args>(args)...));
  }
  void check(std::size_t i) const {
    if (i >= entries.size()) error("gradient {} does not exist ({} registered)", i, entries.size());
  }
  std::vector<ReducerEntry> specs() const {
    std::vector<ReducerEntry> out;
    for (const auto& e : entries) out.push_back(e.spec);
    return out;
  }
  static char* at(void* base, std::size_t offset, DType t) {
    return static_cast<char*>(base) + offset * dtype_size(t);
  }
  void mark_first() {
    if (!t_first && !o.timeline_category.empty() && timeline::on()) t_first = timeline::now_ns();
  }

  // The buckets for bucket cap `cap` (o.bucket_bytes, or autotune's), over
  // the runs. Caller holds mu (or owns the reducer); nothing in flight.
  void lay_out(std::size_t cap) {
    o.bucket_bytes = cap;
    buckets.clear();
    for (auto& list : fusion::plan_buckets(specs(), order, o)) {
      Bucket b;
      const Entry& first = entries[list.front()];
      b.dtype = first.spec.dtype;
      b.wire = fusion::wire_dtype(b.dtype, o.wire);
      b.place = first.spec.place;
      b.run = first.run;
      b.start = first.run_offset;
      for (auto i : list) {
        entries[i].bucket = buckets.size();
        entries[i].offset = entries[i].run_offset - b.start;
        b.count += entries[i].spec.count;
      }
      b.entries = std::move(list);
      b.pending = b.entries.size();
      b.buffer = at(runs[b.run].buffer.data(), b.start, b.wire);
      b.target = b.buffer;
      buckets.push_back(std::move(b));
    }
  }
  // The runs for `order` (the layout with no cap cuts only at a dtype or
  // place change), new buffers; with `keep`, each entry's values move along:
  // the wire buffer's from where its bucket's result lies (a gradient reduced
  // in place included), and the staging slice where there was staging.
  // Caller holds mu (or owns the reducer); nothing in flight.
  void place_runs(std::vector<std::size_t> new_order, bool keep) {
    std::vector<Run> old_runs = std::move(runs);
    std::vector<Entry> was = entries;
    std::vector<const char*> wire_src(entries.size(), nullptr);
    if (keep)
      for (std::size_t i = 0; i < entries.size(); ++i)
        wire_src[i] = at(buckets[entries[i].bucket].target, entries[i].offset,
                         fusion::wire_dtype(entries[i].spec.dtype, o.wire));
    order = std::move(new_order);
    const std::vector<ReducerEntry> specs = this->specs();
    ReducerOptions uncapped = o;
    uncapped.bucket_bytes = uncapped.first_bucket_bytes = SIZE_MAX;
    runs.clear();
    for (auto& list : fusion::plan_buckets(specs, order, uncapped)) {
      std::size_t count = 0;
      for (auto i : list) {
        entries[i].run = runs.size();
        entries[i].run_offset = count;
        count += entries[i].spec.count;
      }
      const ReducerEntry& first = specs[list.front()];
      const DType wire = fusion::wire_dtype(first.dtype, o.wire);
      Run r{fusion::Buffer(count * dtype_size(wire), first.place), {}};
      bool staged = false;
      for (auto i : list) staged = staged || (keep && old_runs[was[i].run].staging);
      if (staged) r.staging = fusion::Buffer(count * dtype_size(first.dtype), first.place);
      runs.push_back(std::move(r));
    }
    if (!keep) return;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      const DType t = e.spec.dtype, wire = fusion::wire_dtype(t, o.wire);
      fusion::convert(at(runs[e.run].buffer.data(), e.run_offset, wire), wire, wire_src[i], wire, e.spec.count,
                      1.0, e.spec.place);
      const Run& from = old_runs[was[i].run];
      if (from.staging)
        fusion::convert(at(runs[e.run].staging.data(), e.run_offset, t), t,
                        at(from.staging.data(), was[i].run_offset, t), t, e.spec.count, 1.0, e.spec.place);
    }
    ++moves;
  }
  // The entries moved to `new_order`, values along, and bucketed anew at the
  // current cap. Caller holds mu; nothing in flight.
  void move_to(std::vector<std::size_t> new_order) {
    place_runs(std::move(new_order), /*keep=*/true);
    lay_out(o.bucket_bytes);
  }
  // DDP's rebuild: at the end of the first step, every rank lays its entries
  // out in the order rank 0 readied them (broadcast, so the layouts agree;
  // rank 0's may differ from the others' where backward is not
  // deterministic), each dtype's grouped (fusion::grouped_order), so that the
  // first bucket holds what backward finishes first and is issued earliest.
  // Where rank 0 readied nothing (it shadowed the step: joined) or the order
  // is today's, nothing moves. Results and
  // gradient views' values move along. Without mu held; every rank calls it
  // at its first completed step (finish() or shadow()).
  void rebuild(std::vector<std::size_t> seen) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!rebuild_armed) return;
      rebuild_armed = false;
    }
    const std::size_t n = entries.size();
    std::vector<std::int64_t> msg(n + 1, -1);
    msg[0] = seen.size() == n ? 1 : 0;
    for (std::size_t k = 0; k < seen.size() && k < n; ++k) msg[k + 1] = static_cast<std::int64_t>(seen[k]);
    comm.broadcast(msg.data(), msg.size(), DType::I64, 0);
    if (msg[0] != 1) return;
    std::vector<std::size_t> next(n);
    std::vector<bool> once(n, false);
    for (std::size_t k = 0; k < n; ++k) {
      const std::int64_t i = msg[k + 1];
      if (i < 0 || static_cast<std::size_t>(i) >= n || once[i])
        error("the readiness order from rank 0 is not a permutation of the {} gradients", n);
      once[i] = true;
      next[k] = static_cast<std::size_t>(i);
    }
    std::lock_guard<std::mutex> lock(mu);
    next = fusion::grouped_order(specs(), next, o);
    if (next == order) return;
    const std::size_t before = buckets.size();
    move_to(std::move(next));
    if (comm.rank() == 0)
      log(LogLevel::Debug, "{}: buckets rebuilt from rank 0's readiness order: {} buckets (were {})", o.what,
          buckets.size(), before);
  }
  // A step begins (its first arrival, readiness or shadow): autotune's new
  // layout takes effect here, on every rank at the same step. Caller holds mu.
  void begin_step() {
    if (!relayout) return;
    relayout = false;
    lay_out(tune->cap());
  }
  // A step ended on this rank (finish() or shadow(), every rank alike):
  // autotune times it and, when a candidate is measured, agrees its score
  // with the other ranks (one allreduce) and picks the next layout.
  // Without mu held.
  void tune_step() {
    if (!tune || !tune->tuning()) return;
    const auto now = std::chrono::steady_clock::now();
    const double seconds = last_end == decltype(last_end){} ? -1.0 : std::chrono::duration<double>(now - last_end).count();
    if (tune->step(seconds)) {
      double score = tune->score();
      comm.allreduce(&score, &score, 1, DType::F64, Op::Max);
      std::lock_guard<std::mutex> lock(mu);
      const std::size_t before = tune->cap();
      tune->scored(score, buckets.size());
      relayout = tune->cap() != before;
    }
    last_end = std::chrono::steady_clock::now();
  }

  // Caller holds mu.
  void issue_vote(bool active) {
    vote_value = active ? 1 : 0;
    vote_work = comm.allreduce_async(&vote_value, &vote_value, 1, DType::I32, Op::Sum);
  }
  void issue(std::size_t k, bool with_vote) {
    if (with_vote && o.vote_each_step && !vote_work.valid()) issue_vote(true);
    Bucket& b = buckets[k];
    if (t_first) {  // the engine's span of the allreduce then carries the bucket's name
      timeline::name_next(fmt::format("bucket {}", k));
      b.t_issue = timeline::now_ns();
    }
    // The gradients' stream goes on with backward while the bucket is reduced:
    // finish() waits for the Work before anything reads the bucket.
    Place overlapped = b.place;
    overlapped.stream_waits = false;
    b.work = comm.allreduce_async(b.target, b.target, b.count, b.wire, wire_op, {}, overlapped);
  }
  void issue_ready() {
    while (next < buckets.size() && buckets[next].pending == 0) issue(next++, true);
  }
  void reset_step() {
    for (auto& e : entries) {
      e.arrivals = 0;
      e.ready = false;
    }
    for (auto& b : buckets) {
      b.pending = b.entries.size();
      b.work = Work();
      b.t_issue = 0;
    }
    next = readied = 0;
    vote_work = Work();
    t_first = t_finish = 0;
  }
  void settle() {
    if (vote_work.valid()) try {
        vote_work.wait();
      } catch (...) {
      }
    for (auto& b : buckets)
      if (b.work.valid()) try {
          b.work.wait();
        } catch (...) {
        }
  }

  // Waits for the step's vote and buckets (issued already), scales the
  // results and ends the step. Without mu held.
  void complete(std::int64_t t_sync) {
    std::exception_ptr failure;
    int active = 0;
    const bool step_vote = vote_work.valid();
    try {
      if (step_vote) {
        vote_work.wait();
        active = vote_value;
      }
    } catch (...) {
      failure = std::current_exception();
    }
    const std::string& cat = o.timeline_category;
    for (std::size_t k = 0; k < buckets.size(); ++k) {
      Bucket& b = buckets[k];
      try {
        b.work.wait();
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
      if (t_sync && b.t_issue)  // issue to done, as this thread saw it
        timeline::span(cat.c_str(), fmt::format("bucket {}", k), b.t_issue, timeline::now_ns(),
                       fmt::format("\"bytes\": {}, \"params\": {}", b.wire_bytes(), b.entries.size()));
    }
    const std::int64_t t_backward = t_first;
    std::vector<std::size_t> seen;
    {
      std::lock_guard<std::mutex> lock(mu);
      seen = std::move(observed);
      observed.clear();
      reset_step();
    }
    if (failure) std::rethrow_exception(failure);
    if (!step_vote) active = voted > 0 ? voted : comm.size();
    if (active < 1) error("no rank stepped (the vote's sum is {})", active);
    if (active != comm.size() && o.op != Op::Sum && o.op != Op::Average)
      error("op {} cannot run while ranks have joined (join() supports Sum and Average)", op_name(o.op));
    // Result = op over the active ranks of (g · prescale), · postscale; the
    // joined ranks added zeros.
    double factor = o.postscale;
    if (o.op == Op::Average)
      factor *= wire_op == Op::Average ? static_cast<double>(comm.size()) / active : 1.0 / active;
    if (factor != 1.0)
      for (auto& b : buckets) fusion::convert(b.target, b.wire, b.target, b.wire, b.count, factor, b.place);
    last_active = active;
    has_results = true;
    if (t_sync) {
      timeline::span(cat.c_str(), "backward", t_backward, t_sync, "\"from\": \"the first gradient ready\"");
      timeline::span(cat.c_str(), "synchronize", t_sync, timeline::now_ns());
    }
    rebuild(std::move(seen));
    tune_step();
  }
};

Reducer::Reducer(Communicator comm, std::vector<ReducerEntry> entries, ReducerOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.o = std::move(options);
  if (!comm.valid()) fail("{}: the reducer needs a communicator from kolo::init()", m.o.what);
  m.comm = std::move(comm);
  if (m.o.passes < 1) m.error("backward_passes_per_step must be >= 1, not {}", m.o.passes);
  if (!(m.o.prescale > 0) || !(m.o.postscale > 0))
    m.error("scale factors must be > 0 (prescale {}, postscale {})", m.o.prescale, m.o.postscale);
  if (m.o.op == Op::Average && m.o.prescale == 1.0) m.wire_op = Op::Average;  // divided inside the reduction
  else m.wire_op = m.o.op == Op::Average ? Op::Sum : m.o.op;
  m.last_active = m.comm.size();
  for (auto& e : entries) m.entries.push_back({e});
  m.place_runs(fusion::registration_order(entries.size()), /*keep=*/false);
  m.rebuild_armed = m.o.rebuild && entries.size() > 1;
  m.tune = fusion::Autotune::make(entries, m.o, m.comm.rank());
  m.lay_out(m.o.bucket_bytes);
}

Reducer::Reducer(Reducer&&) noexcept = default;
Reducer& Reducer::operator=(Reducer&&) noexcept = default;
Reducer::~Reducer() {
  if (impl_) impl_->settle();
}

std::size_t Reducer::entries() const { return impl_->entries.size(); }
std::size_t Reducer::buckets() const { return impl_->buckets.size(); }
const std::vector<std::size_t>& Reducer::bucket(std::size_t b) const {
  if (b >= impl_->buckets.size()) impl_->error("bucket {} does not exist ({} buckets)", b, impl_->buckets.size());
  return impl_->buckets[b].entries;
}
std::size_t Reducer::bucket_of(std::size_t i) const {
  impl_->check(i);
  return impl_->entries[i].bucket;
}

void* Reducer::slot(std::size_t i) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.check(i);
  const auto& e = m.entries[i];
  auto& b = m.buckets[e.bucket];
  if (!b.place.on_host()) m.error("slot() of gradient {}: its bucket is in CUDA memory", i);
  if (b.wire == b.dtype) return m.at(m.runs[e.run].buffer.data(), e.run_offset, b.wire);
  auto& run = m.runs[e.run];
  if (!run.staging) {
    std::size_t count = 0;
    for (const auto& x : m.entries)
      if (x.run == e.run) count += x.spec.count;
    run.staging = fusion::Buffer(count * dtype_size(b.dtype), b.place);
  }
  return m.at(run.staging.data(), e.run_offset, b.dtype);
}

std::shared_ptr<void> Reducer::slot_memory(std::size_t i) {
  void* p = slot(i);
  std::lock_guard<std::mutex> lock(impl_->mu);
  const auto& e = impl_->entries[i];
  const auto& run = impl_->runs[e.run];
  const bool staged = impl_->buckets[e.bucket].wire != impl_->buckets[e.bucket].dtype;
  return std::shared_ptr<void>(staged ? run.staging.owner() : run.buffer.owner(), p);
}

std::uint64_t Reducer::moves() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->moves;
}

Reducer::Arrival Reducer::arrived(std::size_t i) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.check(i);
  m.begin_step();
  m.mark_first();
  auto& e = m.entries[i];
  if (e.ready || e.arrivals >= m.o.passes) return Arrival::Extra;
  return ++e.arrivals == m.o.passes ? Arrival::Final : Arrival::Accumulate;
}

int Reducer::arrivals(std::size_t i) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check(i);
  return impl_->entries[i].arrivals;
}

bool Reducer::ready(std::size_t i, void* grad, bool in_place) {
  Impl& m = *impl_;
  Impl::Bucket* b = nullptr;
  std::size_t offset = 0;
  bool adopt = false;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.check(i);
    m.begin_step();
    auto& e = m.entries[i];
    if (e.ready) m.error("gradient {} was handed over twice in one step", i);
    e.ready = true;
    if (m.rebuild_armed) m.observed.push_back(i);
    m.mark_first();
    b = &m.buckets[e.bucket];
    offset = e.offset;
    adopt = in_place && grad != nullptr && b->entries.size() == 1 && b->wire == b->dtype;
    b->target = adopt ? grad : b->buffer;
  }
  // The copy runs unlocked: other threads' hooks fill other slots meanwhile.
  const std::size_t n = m.entries[i].spec.count;
  const double pre = m.o.prescale;
  if (adopt) {
    if (pre != 1.0) fusion::convert(grad, b->dtype, grad, b->dtype, n, pre, b->place);
  } else {
    char* dst = m.at(b->buffer, offset, b->wire);
    if (grad == nullptr) fusion::zero(dst, n * dtype_size(b->wire), b->place);
    else if (grad != dst || pre != 1.0) fusion::convert(dst, b->wire, grad, b->dtype, n, pre, b->place);
  }
  std::lock_guard<std::mutex> lock(m.mu);
  ++m.readied;
  if (--b->pending == 0) m.issue_ready();
  return adopt;
}

bool Reducer::is_ready(std::size_t i) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check(i);
  return impl_->entries[i].ready;
}

std::vector<std::size_t> Reducer::unready() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < impl_->entries.size(); ++i)
    if (!impl_->entries[i].ready) out.push_back(i);
  return out;
}

bool Reducer::started() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->readied > 0 || impl_->vote_work.valid();
}

void Reducer::finish() {
  Impl& m = *impl_;
  std::int64_t t_sync = 0;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.readied != m.entries.size())
      m.error("finish() with {} of {} gradients not handed over (ready())", m.entries.size() - m.readied,
              m.entries.size());
    if (m.readied == 0) m.begin_step();  // no entries: the step begins here
    if (m.o.vote_each_step && !m.vote_work.valid()) m.issue_vote(true);  // no buckets: the vote still keeps join() in step
    m.issue_ready();
    m.has_results = false;
    t_sync = !m.t_first ? 0 : m.t_finish ? m.t_finish : timeline::now_ns();
  }
  m.complete(t_sync);
}

void Reducer::begin_finish() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->t_first && !impl_->t_finish) impl_->t_finish = timeline::now_ns();
}

void Reducer::result(std::size_t i, void* out) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.check(i);
  if (!m.has_results) m.error("result() before finish() or shadow()");
  const auto& e = m.entries[i];
  const auto& b = m.buckets[e.bucket];
  const char* src = m.at(b.target, e.offset, b.wire);
  if (out != src) fusion::convert(out, b.dtype, src, b.wire, e.spec.count, 1.0, b.place);
}

int Reducer::active() const { return impl_->last_active; }

int Reducer::vote(bool active) {
  Impl& m = *impl_;
  std::int32_t v = active ? 1 : 0;
  m.comm.allreduce(&v, &v, 1, DType::I32, Op::Sum);
  std::lock_guard<std::mutex> lock(m.mu);
  m.voted = v;
  return v;
}

void Reducer::forget_vote() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->voted = 0;
}

void Reducer::shadow() {
  Impl& m = *impl_;
  std::int64_t t_sync = 0;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.readied > 0 || m.vote_work.valid())
      m.error("shadow() in a step whose own gradients are already being reduced (call it before backward "
              "or after step())");
    m.has_results = false;
    m.begin_step();
    for (std::size_t k = 0; k < m.buckets.size(); ++k) {
      auto& b = m.buckets[k];
      fusion::zero(b.buffer, b.wire_bytes(), b.place);
      b.target = b.buffer;
      b.pending = 0;
      m.issue(k, /*with_vote=*/false);  // the joined rank answered the step's vote already
    }
    m.next = m.buckets.size();
    t_sync = m.t_first ? timeline::now_ns() : 0;
  }
  m.complete(t_sync);
}

void Reducer::reset(Communicator comm) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.settle();
  m.reset_step();
  m.has_results = false;
  for (auto& b : m.buckets) b.target = b.buffer;
  m.observed.clear();
  // Every rank, old or new, starts from the registration order and rebuilds
  // after its next step, as a newcomer's reducer does.
  if (m.o.rebuild && m.entries.size() > 1) {
    const auto first = fusion::registration_order(m.entries.size());
    if (m.order != first) m.move_to(first);
    m.rebuild_armed = true;
  }
  if (m.tune) {  // every rank, old or new, tunes from the start
    m.tune->restart();
    m.relayout = false;
    m.last_end = {};
    m.lay_out(m.tune->cap());
  }
  if (comm.valid()) {
    m.comm = std::move(comm);
    m.last_active = m.comm.size();
  }
}

Communicator& Reducer::communicator() { return impl_->comm; }
const ReducerOptions& Reducer::options() const { return impl_->o; }

}  // namespace kolo
