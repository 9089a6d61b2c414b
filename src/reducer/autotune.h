// The reducer's self-tuning (KOLO_AUTOTUNE=1, Horovod's HOROVOD_AUTOTUNE=1):
// which bucket cap (Horovod's fusion threshold, DDP's bucket_cap_mb) makes
// this job's training step fastest.
//
// What it does. The candidates are the configured cap (the baseline, tried
// first) and a fixed grid, 256 KiB to 64 MiB in steps of 4×, less every cap
// that would give this model the layout of a cap already listed (a model of
// 2 MiB has ~3 layouts, not 6). After KOLO_AUTOTUNE_WARMUP_STEPS steps (and
// after the front's own trial: ReducerOptions::tune_after_steps), each
// candidate in turn is the layout for one untimed step (the change) and
// KOLO_AUTOTUNE_STEPS timed ones; its score is the median step time (from
// one finish() to the next, so backward's overlap with the buckets counts),
// the max of that over the ranks (the job is as fast as its slowest rank).
// Then the best is kept for the rest of training — the baseline unless
// another is more than 2 % faster, so noise never moves a job off its
// default for nothing.
//
// Why not Horovod's way. Horovod tunes fusion threshold and cycle time (and
// more) by Bayesian optimisation: 3 warm-up samples and up to 20 more of 10
// steps each, and its users found that training often ended before it did
// (horovod#1551), that its log of hundreds of noisy samples left them asking
// which setting it chose (#2207) and what the score meant (#1745). kolo's
// reducer has one knob that matters (a bucket is issued the moment it is
// full: no cycle time), whose effect is a staircase over few layouts, so a
// small grid measured with medians is done in ~30 steps, robust to an
// outlier step, and says what it chose.
//
// Every rank must use the same layout at every step (the ordered-issue
// contract): every rank counts the same steps, scores at the same step with
// one allreduce (Max) of its median, and so makes the same choice from the
// same numbers; the layout changes at the start of the next step on all.
//
// Rank 0 writes KOLO_AUTOTUNE_LOG (HOROVOD_AUTOTUNE_LOG), a CSV as Horovod's
// autotune log: a header, a "sample" line per candidate as it is scored
// (flushed: a job that stops early still shows what it tried), then one
// "chosen" line.
#pragma once

#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kolo/reducer.h"

namespace kolo::fusion {

class Autotune {
 public:
  // Null where KOLO_AUTOTUNE is off, the threshold was set explicitly, or
  // the entries have one layout whatever the cap.
  static std::unique_ptr<Autotune> make(const std::vector<ReducerEntry>& entries, const ReducerOptions& o,
                                        int rank);
  ~Autotune();

  bool tuning() const { return !done_; }
  // The cap of the layout to use now.
  std::size_t cap() const { return caps_[done_ ? chosen_ : current_]; }

  // A step ended, `seconds` after the one before (< 0: the first). True when
  // the current candidate is measured: agree on score() (the max over ranks)
  // and pass it to scored().
  bool step(double seconds);
  double score() const;  // the median of this rank's timed steps, seconds
  // The agreed score of the current candidate, with its layout's bucket
  // count (for the log); moves on to the next candidate or to the choice.
  void scored(double agreed, std::size_t buckets);
  // Starts over from the baseline (Reducer::reset(): after a lost step or on
  // a new communicator every rank, old and new, tunes from the start).
  void restart();

 private:
  Autotune(std::vector<std::size_t> caps, std::size_t first_bucket_bytes, int warmup, int steps,
           std::string log_path, bool rank0);
  void log_line(const char* kind, std::size_t k, std::size_t buckets, double score);

  std::vector<std::size_t> caps_;  // caps_[0]: the baseline
  std::size_t first_bytes_;
  int warmup_, steps_;
  std::string log_path_;
  bool rank0_;                // says what it chose (KOLO_LOG=info) and writes the log
  std::FILE* log_ = nullptr;  // rank 0's, where asked for
  std::vector<double> scores_, samples_;  // agreed score per candidate; this one's steps
  std::vector<std::size_t> buckets_;
  std::size_t current_ = 0, chosen_ = 0;
  int skip_ = 0;  // steps still not to time
  bool done_ = false;
};

}  // namespace kolo::fusion
