// The peers' allocations a process has mapped (the ipc plane's direct
// allreduce, transport/cuda/ipc_plane.cc), kept open between collectives:
// opening a CUDA IPC handle costs far more than the collective it serves, and
// a training step hands kolo the same buffers step after step.
//
// An allocation is known by its owner's rank and the owner's process-wide
// unique id for it (CUDA's buffer id), with its IPC handle: a new allocation
// at the address of a freed one is a new entry, never the old mapping. At most
// `per_rank` entries per rank stay open; the least recently used one is
// closed first. Only host bookkeeping here (no CUDA): the plane passes the
// functions that open (with each lookup: its errors name the collective) and
// close a mapping, the tests plain ones (tests/gpu/mapping_cache_test.cc).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

namespace kolo::gpu {

// Opaque bytes of an IPC handle (cudaIpcMemHandle_t is 64 bytes).
using HandleBytes = std::array<char, 64>;

class MappingCache {
 public:
  using Open = std::function<char*(int rank, const HandleBytes& handle)>;
  using Close = std::function<void(char* base)>;

  MappingCache(std::size_t per_rank, Close close) : per_rank_(per_rank < 1 ? 1 : per_rank), close_(std::move(close)) {}
  ~MappingCache() { clear(); }
  MappingCache(const MappingCache&) = delete;
  MappingCache& operator=(const MappingCache&) = delete;

  // Rank `rank`'s allocation `id`, as this process maps it (opened by `open`
  // at its first use). An entry of that rank with the same handle but another
  // id (a handle reused for a new allocation) is closed first.
  char* map(int rank, std::uint64_t id, const HandleBytes& handle, const Open& open) {
    ++clock_;
    std::size_t mine = 0, oldest = entries_.size();
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      Entry& e = entries_[i];
      if (e.rank != rank) continue;
      if (e.id == id && e.handle == handle) {
        e.used = clock_;
        return e.base;
      }
      if (e.id == id || e.handle == handle) {
        drop(i);
        return map_new(rank, id, handle, open);
      }
      ++mine;
      if (oldest == entries_.size() || e.used < entries_[oldest].used) oldest = i;
    }
    if (mine >= per_rank_) drop(oldest);
    return map_new(rank, id, handle, open);
  }

  // Closes every mapping.
  void clear() {
    while (!entries_.empty()) drop(entries_.size() - 1);
  }

  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    int rank;
    std::uint64_t id;
    HandleBytes handle;
    char* base;
    std::uint64_t used;
  };

  char* map_new(int rank, std::uint64_t id, const HandleBytes& handle, const Open& open) {
    char* base = open(rank, handle);  // throws: nothing recorded
    entries_.push_back({rank, id, handle, base, clock_});
    return base;
  }
  void drop(std::size_t i) {
    char* base = entries_[i].base;
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
    close_(base);
  }

  const std::size_t per_rank_;
  Close close_;
  std::vector<Entry> entries_;
  std::uint64_t clock_ = 0;
};

}  // namespace kolo::gpu
