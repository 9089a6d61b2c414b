// The agreement of named operations (comm/named_channel.h runs the rounds):
// the table every rank keeps of the names negotiated so far, and what one
// round of announcements decides.
//
// Every rank holds the same table, because it changes only through settle(),
// which every rank calls with the same input (all ranks' announcements of a
// round, gathered): a name announced in full for the first time gets a slot
// (ranks in order, each rank's names in its order of issue); from then on a
// rank announces it as one bit of its bitset — the response cache that makes a
// repeated step cost one small allgather instead of an exchange of names.
// A slot not executed for the longest time and pending nowhere is reused
// once the table holds more than `capacity` names.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/fingerprint.h"

namespace kolo::detail {

// A name with what this rank called under it.
struct Announce {
  std::string name;
  Fingerprint fp;  // seq 0: the position is given at execution
};

// One rank's announcement in one round.
struct RankRound {
  std::vector<std::uint64_t> bits;  // the table's slots this rank has pending (NameTable::words() words)
  std::vector<Announce> full;       // pending names without a slot, or called otherwise than the slot's call
};

struct Settled {
  // Names every rank issued with one call (or, joined ranks, took part in):
  // run them, in this order.
  struct Ready {
    std::string name;
    Fingerprint call;  // what the issuing ranks called (a joined rank runs it on zeros)
  };
  std::vector<Ready> ready;
  // Names every rank issued or joined, but of a kind a joined rank cannot take
  // part in (all but allreduce, as in Horovod): they fail on every rank.
  struct Refused {
    std::string name;
    Fingerprint call;
    int joined;  // a rank that has joined
  };
  std::vector<Refused> refused;
  // Slots every rank issued but not with the same call: each fails on every
  // rank (nothing moved). first/second: two ranks that disagree.
  struct Mismatch {
    std::string name;
    int first, second;
    Fingerprint first_fp, second_fp;
  };
  std::vector<Mismatch> mismatched;
  // Slots some ranks issued and others not yet: which ranks have.
  struct Waiting {
    std::string name;
    std::vector<bool> issued;
  };
  std::vector<Waiting> waiting;
};

class NameTable {
 public:
  explicit NameTable(std::size_t capacity) : capacity_(capacity) {}

  // The slot of `name`, or -1.
  int slot(const std::string& name) const;
  const std::string& name(int slot) const { return slots_[slot].name; }
  const Fingerprint& call(int slot) const { return slots_[slot].fp; }
  // 64-bit words of a bitset over the slots (the same on every rank).
  std::size_t words() const { return (slots_.size() + 63) / 64; }
  std::size_t names() const { return by_name_.size(); }

  // Applies a round: all[r] is rank r's announcement, joined[r] whether rank r
  // is in Horovod's join() (it takes part in every allreduce without issuing
  // it; empty: none). The same call on every rank gives the same result and
  // leaves the same table.
  Settled settle(const std::vector<RankRound>& all, const std::vector<bool>& joined = {});

 private:
  struct Slot {
    std::string name;  // empty: free
    Fingerprint fp;
    std::uint64_t last_used = 0;  // the round it was last executed or created in
  };
  int assign(const Announce& a);
  void evict(const std::vector<bool>& pending);

  std::size_t capacity_;
  std::uint64_t round_ = 0;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, int> by_name_;
  std::vector<int> free_;  // free slot numbers, lowest last
};

// The same call, wherever it stands in the stream.
inline bool same_call(Fingerprint a, Fingerprint b) {
  a.seq = b.seq = 0;
  return a == b;
}

}  // namespace kolo::detail
