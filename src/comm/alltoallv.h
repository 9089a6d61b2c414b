// Alltoallv's arguments: the blocks each rank sends and receives, checked on
// the calling thread, and the exchange of counts that checks them across
// ranks inside the collective (Communicator::alltoallv).
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/blocks.h"
#include "kolo/kolo.h"

namespace kolo::collectives {
class Backend;
}

namespace kolo::detail {

struct Context;

// One rank's blocks, in elements. Offsets are filled in (packed in rank
// order) where the caller passed none.
struct AlltoallvArgs {
  std::vector<std::size_t> send_counts, send_offsets, recv_counts, recv_offsets;
  std::size_t in_elements = 0, out_elements = 0;  // the extent of the blocks in each buffer

  collectives::AlltoallvLayout layout(std::size_t longest) const {
    return {{send_offsets, send_counts}, {recv_offsets, recv_counts}, longest};
  }
};

// Checks one rank's arguments for `size` ranks: n counts and n (or no)
// offsets each, no overflow, output blocks that do not overlap. Errors name
// the argument and the block.
AlltoallvArgs alltoallv_args(const char* what, int size, DType t, std::vector<std::size_t> send_counts,
                             std::vector<std::size_t> send_offsets, std::vector<std::size_t> recv_counts,
                             std::vector<std::size_t> recv_offsets);

// Inside the collective: every rank's counts travel in one allgather (which
// also carries the call's fingerprint), and every rank checks the whole
// matrix: rank i's send count to j must be rank j's receive count from i.
// A disagreement is a MismatchError on every rank, worded the same on each
// and naming both ranks and counts, before any data moved (so the
// communicator stays usable). Returns the largest block any rank sends.
std::size_t agree_alltoallv_counts(Context& c, collectives::Backend& be, const AlltoallvArgs& a);

}  // namespace kolo::detail
