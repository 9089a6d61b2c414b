// kolo::Reducer — the gradient path of every front (kolo_torch's and
// kolo.torch's DistributedOptimizer, kolo.tensorflow's fused tape and Keras
// optimizer), framework-neutral: it sees gradients as (count, dtype, place)
// entries and pointers, and readiness calls. Compiles as C++17.
//
//   kolo::Reducer r(comm, {{n0, kolo::DType::F32}, {n1, kolo::DType::F32}}, options);
//   // each step, in any order per rank (e.g. from autograd hooks):
//   if (r.arrived(i) == kolo::Reducer::Arrival::Final) r.ready(i, grad_i);
//   for (auto i : r.unready()) r.ready(i, grad_or_nullptr);   // what backward did not hand over
//   r.finish();                                               // waits; results scaled
//   r.result(i, out_i);                                       // per entry
//
// Buckets: the entries in reverse registration order (the order backward
// usually finishes them, as DDP), cut where the dtype or place changes or
// where the next entry would take the bucket past its cap (wire bytes): the
// first bucket's cap is first_bucket_bytes (communication starts early), the
// others' bucket_bytes (Horovod's fusion threshold). An entry bigger than the
// cap is a bucket alone. The layout depends on the entries and options only,
// so it is the same on every rank that registers the same gradients.
//
// Rebuild (DDP's, options.rebuild): at the end of the first step the entries
// are laid out anew in the order rank 0 readied them — broadcast, so every
// rank agrees —, so the first bucket holds what backward finishes first;
// as in DDP, each dtype (and place) keeps one bucket open, so gradients of
// two dtypes readied interleaved share buckets, which follow one another in
// the order they completed.
// Entries move then (slot() changes, moves() counts it), their values with
// them; reset() returns to the registration order and rebuilds again after
// the next step, so that survivors and newcomers of an elastic job agree.
//
// Ordered issue: a bucket's allreduce starts when its last entry is ready
// and every bucket before it has started, so every rank issues the same
// allreduces in the same order whatever order its gradients arrive in (the
// unnamed, call-order contract). Entries are copied (cast to the wire dtype
// when compressing, multiplied by prescale) into the bucket's fusion buffer;
// a bucket of one entry whose caller lets it (ready(..., in_place)) is
// reduced where the gradient lies.
//
// Result of entry i: op over the ranks that stepped of (g_i · prescale), then
// · postscale. Average divides by the ranks that stepped: all of them, or
// under Horovod's join the count of the active-ranks vote (joined ranks add
// zeros through shadow()). With op Average and prescale 1 the division
// happens in the reduction (kolo's Average, in f32 for 16-bit floats).
//
// Thread safety: every member may be called from any thread (autograd runs
// hooks on its own threads); one internal mutex, never held while waiting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kolo/kolo.h"

namespace kolo {

// The fusion threshold setting: KOLO_FUSION_THRESHOLD (bytes), else
// HOROVOD_FUSION_THRESHOLD, else `front_default` (25 MiB for torch, whose
// buckets overlap backward as DDP's; 64 MiB for TensorFlow, whose gradients
// all arrive at once). 0: every gradient in a bucket of its own.
std::size_t fusion_threshold(std::size_t front_default);

// One gradient: `count` elements of a floating `dtype` in host memory or on a
// CUDA device (`place`; its stream orders the bucket's copies and allreduce).
struct ReducerEntry {
  std::size_t count = 0;
  DType dtype = DType::F32;
  Place place;
};

// Compression: the dtype on the wire. Same, or f16/bf16 (half the bytes;
// reduced in f32 by kolo, converted back after).
enum class Wire : std::uint8_t { Same, F16, BF16 };

struct ReducerOptions {
  std::size_t bucket_bytes = 25u << 20;
  std::size_t first_bucket_bytes = 1u << 20;  // capped at bucket_bytes
  Op op = Op::Average;  // Min, Max and Product too, but not while ranks have joined
  double prescale = 1.0;
  double postscale = 1.0;
  Wire wire = Wire::Same;
  // Gradient accumulation: an entry is final at its passes-th arrival.
  int passes = 1;
  // Horovod's join protocol: every step's first allreduce is a 4-byte vote
  // (1 per rank that steps, 0 from a joined rank, Reducer::vote(false));
  // its sum is the step's divisor for Average.
  bool vote_each_step = false;
  // KOLO_AUTOTUNE: steps in which the front runs a trial of its own
  // (kolo_torch's overlap trial); the autotune's warm-up begins after them,
  // so that the two never time the same steps.
  int tune_after_steps = 0;
  // DDP's bucket rebuild after the first step, from rank 0's readiness
  // order (see above). Off: the registration order throughout.
  bool rebuild = true;
  // Timeline spans ("backward", "bucket i", "synchronize") under this
  // category; empty: none.
  std::string timeline_category;
  // What the errors name ("DistributedOptimizer").
  std::string what = "Reducer";
};

class Reducer {
 public:
  Reducer(Communicator comm, std::vector<ReducerEntry> entries, ReducerOptions options);
  Reducer(Reducer&&) noexcept;
  Reducer& operator=(Reducer&&) noexcept;
  ~Reducer();  // waits for the allreduces in flight, ignoring their errors

  // --- layout ---
  std::size_t entries() const;
  std::size_t buckets() const;
  // The entries of bucket b, in their order in its buffer.
  const std::vector<std::size_t>& bucket(std::size_t b) const;
  std::size_t bucket_of(std::size_t entry) const;
  // Entry i's place in its bucket's fusion buffer (its own dtype and count,
  // contiguous), valid as long as the reducer: a front may keep the gradient
  // there (DDP's gradient_as_bucket_view), ready(i, slot(i)) then copies
  // nothing. Host entries only. The slot moves when moves() changes (the
  // rebuild after the first step, reset()): a front keeping views of slots
  // takes them anew then; the values are already there.
  void* slot(std::size_t i);
  // slot(i) owning its memory: a view made of it keeps the memory alive
  // after the entry moved (the view then no longer aliases the bucket).
  std::shared_ptr<void> slot_memory(std::size_t i);
  // How many times the entries moved since construction.
  std::uint64_t moves() const;

  // --- one step ---
  enum class Arrival { Accumulate, Final, Extra };
  // Counts a backward pass's gradient for entry i: Final at the passes-th,
  // Extra after (the caller reports it; nothing changes).
  Arrival arrived(std::size_t i);
  int arrivals(std::size_t i) const;  // this step's, so far
  // Entry i's gradient for this step (count elements of its dtype, its
  // place, contiguous; nullptr: zeros); issues the buckets that are then
  // complete, in order. in_place: the caller lets a bucket of this entry
  // alone be reduced in `grad` itself (it stays alive and untouched until
  // finish()); returns true when it is. Readying an entry twice in a step is
  // an error.
  bool ready(std::size_t i, void* grad, bool in_place = false);
  bool is_ready(std::size_t i) const;
  std::vector<std::size_t> unready() const;
  // Something of this step is in flight (an entry readied, or the vote).
  bool started() const;
  // The front's synchronize begins (before it hands over what backward did
  // not): the timeline's "backward" ends and "synchronize" begins here, so
  // the buckets issued after it count as not overlapped. Optional.
  void begin_finish();
  // Every entry must be ready. Waits for every bucket, applies the scaling;
  // the first error of an allreduce is thrown after all were waited for.
  void finish();
  // After finish(): entry i's result into `out` (its dtype and count,
  // contiguous, its place). Nothing moves where out is where the result lies
  // (slot(i), or the gradient reduced in place).
  void result(std::size_t i, void* out);
  // Ranks whose gradients the last finished step averaged.
  int active() const;

  // --- join ---
  // Blocking: the 4-byte vote (Sum of 1 per active rank); returns the sum.
  // With vote_each_step it is the joined ranks' answer to the steps' own
  // vote (call with false); without, the caller votes before each step and
  // the sum is the coming steps' divisor until forget_vote().
  int vote(bool active);
  void forget_vote();
  // A joined rank's part in a step of the others: zeros into every bucket's
  // allreduce, in order; waits. Results (the others' average) as finish()'s.
  void shadow();

  // Drops the step in flight (waits for its allreduces, ignoring errors);
  // with a valid `comm` the next steps run on it (elastic re-formation).
  void reset(Communicator comm = {});
  Communicator& communicator();
  const ReducerOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo
