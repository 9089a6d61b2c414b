// The timeline recorder: what each rank did, collective by collective, for a
// Chrome-trace file (kolo.h's kolo::timeline; the file, the merge across ranks
// and the report are report/timeline_writer.cc's, above the communicator). It
// sits below the transports and collectives that record into it, and includes
// nothing above the kernels.
//
// Recording must not slow the job it watches, and must cost nothing while
// off. So:
// - Off, a collective pays one relaxed load and a branch where it is issued
//   (Trace's constructor) and a null test where it runs; the other hooks (the
//   backend's algorithm choice, the reduction clock) are a thread-local store
//   or the same load and branch.
// - On, a collective takes two or three clock reads and appends one Event
//   (raw fields, no formatting) to a buffer of its own thread: each buffer
//   has its own mutex, which only the writer's snapshot thread contends for,
//   once a second. Formatting to JSON happens on that thread.
// - Phases are the ones kolo has: queued on the engine (submit → start),
//   the time this rank waited at the first synchronisation for the last rank
//   to arrive — where shared memory compares fingerprints and TCP exchanges
//   its fingerprint header, so the wait and the mismatch check are one
//   phase — then data movement and the reduction. The pipelined algorithms
//   interleave the last two chunk by chunk, so the reduction is the sum of
//   the kernel calls' time (reduce_us) and movement the rest; the wait is
//   computed at the merge from every rank's arrival on clocks aligned through
//   the store (a rank cannot see its own wait apart from data movement on TCP).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/fingerprint.h"
#include "kernels/reduce.h"

namespace kolo::detail {
struct Context;
}

namespace kolo::detail::timeline {

extern std::atomic<bool> recording;
inline bool on() { return recording.load(std::memory_order_relaxed); }
inline std::int64_t now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The algorithm a backend chose for the collective running on this thread
// (set where there is a choice: allreduce); read back by Trace.
inline thread_local const char* algorithm = nullptr;
// Nanoseconds this thread spent in reduction kernels while recording.
inline thread_local std::int64_t reduce_ns = 0;

// Times a reduction kernel call into reduce_ns.
class ReduceClock {
 public:
  ReduceClock() : t0_(on() ? now() : 0) {}
  ~ReduceClock() {
    if (t0_ != 0) reduce_ns += now() - t0_;
  }
  ReduceClock(const ReduceClock&) = delete;
  ReduceClock& operator=(const ReduceClock&) = delete;

 private:
  std::int64_t t0_;
};

// kernels::reduce, timed into reduce_ns while recording (the collectives call this).
template <class... A>
void timed_reduce(A&&... a) {
  ReduceClock clock;
  kernels::reduce(std::forward<A>(a)...);
}

// A communicator as the trace names it; shared by its events.
struct CommInfo {
  std::string key;         // its store key space: the same on every member
  std::vector<int> world;  // world rank of each member
};

struct Event {
  // A collective (comm set) or a caller's span (category set).
  std::shared_ptr<const CommInfo> comm;
  Fingerprint fp;
  const char* transport = nullptr;
  const char* algorithm = nullptr;
  std::string category;  // a caller's span: its category (a collective: empty)
  std::string name;  // the caller's name for a collective; a span's name
  std::string args;  // a span's JSON object members
  std::int64_t submit = 0, begin = 0, end = 0, reduce = 0;  // steady clock, ns
  std::size_t bytes = 0;  // this rank's payload (the larger of input and output)
  int thread = 0;         // index of the recording thread
  bool failed = false;
};

// Ends the timeline session started on a communicator when it goes
// (timeline_writer.h).
struct Attachment {
  ~Attachment();
};

// Appends to this thread's buffer.
void record(Event&& e);
// Moves every buffer's events into out (the writer's snapshot thread).
void take_events(std::vector<Event>& out);

// One collective's record, made where it is issued (submit time, the
// caller's name) and completed where it runs.
class Trace {
 public:
  Trace(Context& c, std::size_t bytes) {
    if (on()) arm(c, bytes);
  }
  void start(const Fingerprint& fp, const char* transport) {
    if (!ev_) return;
    ev_->fp = fp;
    ev_->transport = transport;
    algorithm = nullptr;
    reduce0_ = reduce_ns;
    ev_->begin = now();
  }
  void finish(bool failed) {
    if (!ev_ || ev_->begin == 0) return;
    ev_->end = now();
    ev_->reduce = reduce_ns - reduce0_;
    ev_->algorithm = algorithm;
    ev_->failed = failed;
    if (on()) record(std::move(*ev_));
    ev_.reset();
  }

 private:
  void arm(Context& c, std::size_t bytes);
  // Shared: the op lambda holding it is copied into std::function.
  std::shared_ptr<Event> ev_;
  std::int64_t reduce0_ = 0;
};

}  // namespace kolo::detail::timeline
