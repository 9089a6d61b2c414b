// kolo::Reducer (include/kolo/reducer.h): one step's state machine — entries
// readied in any order, buckets issued in order, the join vote, waiting,
// scaling and results. The layout is layout.cc's, the copies fusion_copy.cc's.
#include "kolo/reducer.h"

#include <fmt/format.h>

#include <exception>
#include <mutex>

#include "core/config.h"
#include "core/error.h"
#include "reducer/fusion_copy.h"
#include "reducer/layout.h"

namespace kolo {

std::size_t fusion_threshold(std::size_t front_default) {
  const std::int64_t v = config::fusion_threshold();
  if (v < -1) fail("KOLO_FUSION_THRESHOLD (or HOROVOD_FUSION_THRESHOLD) is {}; it must be >= 0 bytes", v);
  return v < 0 ? front_default : static_cast<std::size_t>(v);
}

struct Reducer::Impl {
  struct Entry {
    ReducerEntry spec;
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
    fusion::Buffer buffer;   // wire dtype: what is reduced
    fusion::Buffer staging;  // entry dtype, where wire != dtype and slot() was asked for
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
  std::vector<Bucket> buckets;

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
  static char* at(void* base, std::size_t offset, DType t) {
    return static_cast<char*>(base) + offset * dtype_size(t);
  }
  void mark_first() {
    if (!t_first && !o.timeline_category.empty() && timeline::on()) t_first = timeline::now_ns();
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
    b.work = comm.allreduce_async(b.target, b.target, b.count, b.wire, wire_op, {}, b.place);
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
    {
      std::lock_guard<std::mutex> lock(mu);
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
  for (auto& list : fusion::plan_buckets(entries, m.o)) {
    Impl::Bucket b;
    const ReducerEntry& first = entries[list.front()];
    b.dtype = first.dtype;
    b.wire = fusion::wire_dtype(first.dtype, m.o.wire);
    b.place = first.place;
    for (auto i : list) {
      m.entries[i].bucket = m.buckets.size();
      m.entries[i].offset = b.count;
      b.count += entries[i].count;
    }
    b.entries = std::move(list);
    b.pending = b.entries.size();
    b.buffer = fusion::Buffer(b.wire_bytes(), b.place);
    b.target = b.buffer.data();
    m.buckets.push_back(std::move(b));
  }
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
  if (b.wire == b.dtype) return m.at(b.buffer.data(), e.offset, b.wire);
  if (!b.staging) b.staging = fusion::Buffer(b.count * dtype_size(b.dtype), b.place);
  return m.at(b.staging.data(), e.offset, b.dtype);
}

Reducer::Arrival Reducer::arrived(std::size_t i) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.check(i);
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
    auto& e = m.entries[i];
    if (e.ready) m.error("gradient {} was handed over twice in one step", i);
    e.ready = true;
    m.mark_first();
    b = &m.buckets[e.bucket];
    offset = e.offset;
    adopt = in_place && grad != nullptr && b->entries.size() == 1 && b->wire == b->dtype;
    b->target = adopt ? grad : b->buffer.data();
  }
  // The copy runs unlocked: other threads' hooks fill other slots meanwhile.
  const std::size_t n = m.entries[i].spec.count;
  const double pre = m.o.prescale;
  if (adopt) {
    if (pre != 1.0) fusion::convert(grad, b->dtype, grad, b->dtype, n, pre, b->place);
  } else {
    char* dst = m.at(b->buffer.data(), offset, b->wire);
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
    for (std::size_t k = 0; k < m.buckets.size(); ++k) {
      auto& b = m.buckets[k];
      fusion::zero(b.buffer.data(), b.wire_bytes(), b.place);
      b.target = b.buffer.data();
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
  for (auto& b : m.buckets) b.target = b.buffer.data();
  if (comm.valid()) {
    m.comm = std::move(comm);
    m.last_active = m.comm.size();
  }
}

Communicator& Reducer::communicator() { return impl_->comm; }
const ReducerOptions& Reducer::options() const { return impl_->o; }

}  // namespace kolo
