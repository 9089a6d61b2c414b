#include "comm/alltoallv.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

#include "core/error.h"
#include "core/rejected.h"
#include "comm/context.h"

namespace kolo::detail {

namespace {

// Fills packed offsets where none were given; checks the sizes and that no
// block's end overflows the byte size. Returns the blocks' extent.
std::size_t check_blocks(const char* what, const char* side, int size, std::size_t es,
                         const std::vector<std::size_t>& counts, std::vector<std::size_t>& offsets) {
  const auto n = static_cast<std::size_t>(size);
  if (counts.size() != n)
    fail("{}: {} counts has {} entries but the communicator has {} ranks", what, side, counts.size(), size);
  const bool packed = offsets.empty();
  if (!packed && offsets.size() != n)
    fail("{}: {} offsets has {} entries but the communicator has {} ranks (or pass none: blocks packed in rank "
         "order)", what, side, offsets.size(), size);
  if (packed) offsets.resize(n);
  // A negative count or offset converted to size_t lands above the limit too.
  const std::size_t limit = std::numeric_limits<std::int64_t>::max() / es;
  std::size_t next = 0, extent = 0;
  for (std::size_t j = 0; j < n; ++j) {
    if (packed) offsets[j] = next;
    if (counts[j] > limit || offsets[j] > limit - counts[j])
      fail("{}: {} block {} ({} elements from element {}) is too large (negative, or overflows the byte size)",
           what, side, j, counts[j], offsets[j]);
    next = offsets[j] + counts[j];
    if (counts[j] > 0) extent = std::max(extent, next);
  }
  return extent;
}

}  // namespace

AlltoallvArgs alltoallv_args(const char* what, int size, DType t, std::vector<std::size_t> send_counts,
                             std::vector<std::size_t> send_offsets, std::vector<std::size_t> recv_counts,
                             std::vector<std::size_t> recv_offsets) {
  AlltoallvArgs a{std::move(send_counts), std::move(send_offsets), std::move(recv_counts),
                  std::move(recv_offsets)};
  const std::size_t es = dtype_size(t);
  a.in_elements = check_blocks(what, "send", size, es, a.send_counts, a.send_offsets);
  a.out_elements = check_blocks(what, "receive", size, es, a.recv_counts, a.recv_offsets);
  // Two peers writing the same output elements would leave either's data:
  // output blocks must be disjoint (input blocks may share elements).
  std::vector<std::size_t> order(a.recv_counts.size());
  std::iota(order.begin(), order.end(), 0);
  std::erase_if(order, [&](std::size_t j) { return a.recv_counts[j] == 0; });
  std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return a.recv_offsets[x] < a.recv_offsets[y]; });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const std::size_t p = order[k - 1], q = order[k];
    if (a.recv_offsets[p] + a.recv_counts[p] > a.recv_offsets[q])
      fail("{}: receive blocks {} (elements {}..{}) and {} (elements {}..{}) overlap", what, p, a.recv_offsets[p],
           a.recv_offsets[p] + a.recv_counts[p], q, a.recv_offsets[q], a.recv_offsets[q] + a.recv_counts[q]);
  }
  return a;
}

std::size_t agree_alltoallv_counts(Context& c, collectives::Backend& be, const AlltoallvArgs& a) {
  static_assert(sizeof(std::size_t) == sizeof(std::int64_t), "counts travel as i64");
  const auto n = static_cast<std::size_t>(c.size);
  // Row q of `all`: rank q's send counts, then its receive counts.
  std::vector<std::size_t> mine(2 * n), all(2 * n * n);
  std::copy(a.send_counts.begin(), a.send_counts.end(), mine.begin());
  std::copy(a.recv_counts.begin(), a.recv_counts.end(), mine.begin() + n);
  be.allgatherv(mine.data(), all.data(), std::vector<std::size_t>(n, 2 * n), DType::I64);
  std::string wrong;
  int shown = 0, more = 0;
  std::size_t longest = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t sends = all[i * 2 * n + j], expects = all[j * 2 * n + n + i];
      longest = std::max(longest, sends);
      if (sends == expects) continue;
      if (shown == 3) {
        ++more;
        continue;
      }
      ++shown;
      wrong += fmt::format("{}{} sends {} elements to {}, but {} expects {} from {}", wrong.empty() ? "" : "; ",
                           c.name(static_cast<int>(i)), sends, c.name(static_cast<int>(j)),
                           c.name(static_cast<int>(j)), expects, c.name(static_cast<int>(i)));
    }
  if (!wrong.empty())
    fail_as<MismatchError>("mismatched alltoallv counts at collective #{}: {}{}", c.seq, wrong,
                           more > 0 ? fmt::format(" (and {} more pairs)", more) : "");
  return longest;
}

}  // namespace kolo::detail
