// The ipc plane's cache of its peers' mapped allocations (transport/
// mapping_cache.h), on the CPU: what is opened and closed when, with plain
// functions in place of CUDA IPC's open and close, which the GPU machine runs
// (gpu.collectives.*.ipc: allreduces from KOLO_GPU_IPC_DIRECT_BYTES on, every
// size in a buffer of its own).
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "transport/mapping_cache.h"

namespace kolo::gpu {
namespace {

HandleBytes handle(char tag) {
  HandleBytes h{};
  h.fill(tag);
  return h;
}

// Opens hand out distinct fake bases; every open and close is recorded.
struct Book {
  std::vector<std::string> log;
  std::map<char*, int> open;  // base -> how many times open
  std::vector<char> memory = std::vector<char>(1000);
  int next = 0;

  MappingCache cache(std::size_t per_rank) {
    return MappingCache(per_rank, [this](char* base) {
      --open[base];
      log.push_back("close " + std::to_string(base - memory.data()));
    });
  }
  char* map(MappingCache& c, int rank, std::uint64_t id, const HandleBytes& h) {
    return c.map(rank, id, h, [this](int r, const HandleBytes& hb) {
      if (hb[0] == 'X') throw std::runtime_error("cannot open");
      char* base = memory.data() + next++;
      ++open[base];
      log.push_back("open " + std::to_string(r) + hb[0]);
      return base;
    });
  }
  int still_open() const {
    int n = 0;
    for (const auto& [base, k] : open) n += k;
    return n;
  }
};

TEST(MappingCache, OpensEachAllocationOnceAndClosesAllAtTheEnd) {
  Book book;
  {
    MappingCache c = book.cache(4);
    char* a = book.map(c, 1, 10, handle('a'));
    EXPECT_EQ(book.map(c, 1, 10, handle('a')), a);
    char* b = book.map(c, 2, 10, handle('a'));  // the same id and handle from another rank: its own
    EXPECT_NE(a, b);
    EXPECT_EQ(book.map(c, 1, 10, handle('a')), a);
    EXPECT_EQ(book.log, (std::vector<std::string>{"open 1a", "open 2a"}));
    EXPECT_EQ(c.size(), 2u);
  }
  EXPECT_EQ(book.still_open(), 0);
}

TEST(MappingCache, ANewAllocationIsNeverTheOldMapping) {
  Book book;
  MappingCache c = book.cache(4);
  char* a = book.map(c, 0, 10, handle('a'));
  // The owner freed allocation 10; a new one (id 11) got the same handle
  // bytes: the old mapping is closed before the new one is opened.
  char* b = book.map(c, 0, 11, handle('a'));
  EXPECT_NE(a, b);
  EXPECT_EQ(book.log, (std::vector<std::string>{"open 0a", "close 0", "open 0a"}));
  // The same id with another handle: opened anew too.
  book.map(c, 0, 11, handle('b'));
  EXPECT_EQ(book.log.back(), "open 0b");
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(book.still_open(), 1);
}

TEST(MappingCache, ClosesTheLeastRecentlyUsedOfTheRank) {
  Book book;
  MappingCache c = book.cache(2);
  char* a = book.map(c, 0, 1, handle('a'));
  book.map(c, 0, 2, handle('b'));
  book.map(c, 1, 3, handle('c'));  // another rank's do not count
  book.map(c, 0, 1, handle('a'));  // a used again: b is the oldest of rank 0
  book.map(c, 0, 4, handle('d'));
  EXPECT_EQ(book.log.back(), "open 0d");
  EXPECT_EQ(book.log[book.log.size() - 2], "close 1");  // b's base
  EXPECT_EQ(book.map(c, 0, 1, handle('a')), a);
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(book.still_open(), 3);
  c.clear();
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(book.still_open(), 0);
}

TEST(MappingCache, AFailedOpenRecordsNothing) {
  Book book;
  MappingCache c = book.cache(2);
  book.map(c, 0, 1, handle('a'));
  EXPECT_THROW(book.map(c, 0, 2, handle('X')), std::runtime_error);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(book.map(c, 0, 1, handle('a')), book.memory.data());
  EXPECT_EQ(book.log, (std::vector<std::string>{"open 0a"}));
}

}  // namespace
}  // namespace kolo::gpu
