// Where the blocks of a buffer lie, in elements: block i is
// [offsets[i], offsets[i] + counts[i]). Rings (one block per rank) and
// alltoallv (block j goes to, or comes from, rank j) take them.
#pragma once

#include <cstddef>
#include <span>

namespace kolo::collectives {

struct Blocks {
  std::span<const std::size_t> offsets;
  std::span<const std::size_t> counts;
};

// An alltoallv's layout on this rank: block j of `send` goes to rank j,
// block j of `recv` comes from rank j. `longest`: the largest block any rank
// sends, the same on every rank (algorithms that step through the blocks in
// lockstep, as shared memory does, need the same number of steps everywhere).
struct AlltoallvLayout {
  Blocks send;
  Blocks recv;
  std::size_t longest = 0;
};

}  // namespace kolo::collectives
