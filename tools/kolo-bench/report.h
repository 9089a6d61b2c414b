// Rank 0's output: an nccl-tests style table per collective and, with
// --anchor-format, the anchors' one-line-per-size format.
#pragma once

#include <vector>

#include "kolo/kolo.h"
#include "options.h"
#include "runner.h"

namespace kolo_bench {

class Report {
 public:
  Report(kolo::Communicator& comm, const Options& o) : comm_(comm), o_(o) {}
  void begin(Coll c);
  void row(Coll c, const Result& r);
  // Prints the averages and the anchor lines; returns false if any #wrong > 0.
  bool end(Coll c);

 private:
  bool printing() const { return comm_.rank() == 0; }
  kolo::Communicator& comm_;
  const Options& o_;
  std::vector<Result> rows_;
};

}  // namespace kolo_bench
