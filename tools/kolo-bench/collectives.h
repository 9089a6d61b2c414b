// One collective at one message size: its buffers, one call of it, and the
// check of what it left in them.
#pragma once

#include <cstddef>
#include <memory>

#include "kolo/kolo.h"
#include "options.h"

namespace kolo_bench {

class Case {
 public:
  virtual ~Case() = default;

  // The message as reported (nccl-tests' convention, see the README) after
  // rounding to whole elements per rank.
  std::size_t bytes = 0, count = 0;

  // Inputs get the rank's pattern, outputs a poison no check accepts.
  virtual void prepare() = 0;
  // Poisons the outputs again, inputs untouched; only for idempotent cases.
  virtual void reset_outputs() = 0;
  // One call; blocking calls return an empty Work.
  virtual kolo::Work start(bool async) = 0;
  // Elements of this rank's result that differ from the host's expectation.
  virtual std::size_t check() = 0;
  // Whether repeating the call leaves its inputs (hence its result) unchanged:
  // then the timed loop's own result is checked; otherwise (in-place
  // reductions) prepare() and one more call produce the result to check.
  virtual bool idempotent() const = 0;
};

std::unique_ptr<Case> make_case(Coll c, kolo::Communicator& comm, const Options& o,
                                std::size_t bytes);

// busbw = algbw * factor (nccl-tests): the bytes each rank's busiest link
// carries per byte of message, comparable across rank counts.
double bus_factor(Coll c, int n);

}  // namespace kolo_bench
