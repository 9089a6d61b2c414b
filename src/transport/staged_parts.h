// The host data plane's pipeline for large allreduces and broadcasts
// (transport/cuda/host_plane.cc): the buffer moves in parts, so that the copy
// of one part between the device and pinned host memory overlaps the host
// transport's collective on another — across hosts the network, not PCIe,
// then sets the pace. Each element's result depends on that element alone in
// these two collectives, so every part is a collective of its own, on every
// rank the same parts (the part size is a job-wide setting).
//
// Kept apart from CUDA so that its bookkeeping is tested on the CPU
// (tests/gpu/staged_parts_test.cc); the host plane fills in the copies.
#pragma once

#include <algorithm>
#include <cstddef>

namespace kolo::gpu {

// `count` elements in parts of at most `per` elements (per >= 1): part i is
// [first(i), first(i) + size(i)).
struct Parts {
  std::size_t count;
  std::size_t per;
  std::size_t number() const { return (count + per - 1) / per; }
  std::size_t first(std::size_t i) const { return i * per; }
  std::size_t size(std::size_t i) const { return std::min(per, count - i * per); }
};

// Runs the pipeline. `stages` provides, each given (part index, first, size):
//   download  — queue the part's copy to host memory (all are queued first:
//               the copy engine streams them while the host works);
//   downloaded — wait until that copy has landed;
//   collective — the host transport's collective on the part;
//   upload    — queue the part's copy back to the device;
// and uploaded() waits for every upload. `download`: whether this rank reads
// its device input at all (a broadcast's non-roots do not).
template <class Stages>
void run_staged(const Parts& parts, bool download, Stages& stages) {
  const std::size_t n = parts.number();
  if (download)
    for (std::size_t i = 0; i < n; ++i) stages.download(i, parts.first(i), parts.size(i));
  for (std::size_t i = 0; i < n; ++i) {
    if (download) stages.downloaded(i, parts.first(i), parts.size(i));
    stages.collective(i, parts.first(i), parts.size(i));
    stages.upload(i, parts.first(i), parts.size(i));
  }
  stages.uploaded();
}

}  // namespace kolo::gpu
