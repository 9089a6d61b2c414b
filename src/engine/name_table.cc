#include "engine/name_table.h"

#include <algorithm>

namespace kolo::detail {

int NameTable::slot(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

int NameTable::assign(const Announce& a) {
  int s;
  if (!free_.empty()) {
    s = free_.back();
    free_.pop_back();
  } else {
    s = static_cast<int>(slots_.size());
    slots_.emplace_back();
  }
  slots_[s] = {a.name, a.fp, round_};
  slots_[s].fp.seq = 0;
  by_name_.emplace(a.name, s);
  return s;
}

Settled NameTable::settle(const std::vector<RankRound>& all, const std::vector<bool>& joined) {
  ++round_;
  const std::size_t ranks = all.size();
  const std::size_t old_slots = slots_.size();
  // New names get their slots first, in an order every rank agrees on.
  for (const auto& r : all)
    for (const auto& a : r.full)
      if (slot(a.name) < 0) assign(a);

  // Per slot: which ranks have it pending, and with which call.
  std::vector<std::vector<const Fingerprint*>> calls(slots_.size(), std::vector<const Fingerprint*>(ranks));
  std::vector<bool> touched(slots_.size(), false);
  for (std::size_t r = 0; r < ranks; ++r) {
    for (std::size_t w = 0; w < all[r].bits.size(); ++w) {
      for (std::uint64_t bits = all[r].bits[w]; bits != 0; bits &= bits - 1) {
        const std::size_t s = w * 64 + static_cast<std::size_t>(__builtin_ctzll(bits));
        if (s >= old_slots || slots_[s].name.empty()) continue;  // not a slot this round began with
        calls[s][r] = &slots_[s].fp;
        touched[s] = true;
      }
    }
    for (const auto& a : all[r].full) {
      const int s = slot(a.name);
      calls[s][r] = &a.fp;
      touched[s] = true;
    }
  }

  Settled out;
  std::vector<bool> pending(slots_.size(), false);
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    if (!touched[s]) continue;
    const auto& c = calls[s];
    int first = -1, absent_joined = -1;
    bool everyone = true;
    for (std::size_t r = 0; r < ranks; ++r) {
      if (c[r] != nullptr) {
        if (first < 0) first = static_cast<int>(r);
      } else if (r < joined.size() && joined[r]) {
        absent_joined = static_cast<int>(r);
      } else {
        everyone = false;
      }
    }
    if (!everyone) {
      Settled::Waiting w{slots_[s].name, std::vector<bool>(ranks)};
      for (std::size_t r = 0; r < ranks; ++r) w.issued[r] = c[r] != nullptr;
      out.waiting.push_back(std::move(w));
      pending[s] = true;
      continue;
    }
    slots_[s].last_used = round_;
    std::size_t other = 0;
    while (other < ranks && (c[other] == nullptr || same_call(*c[first], *c[other]))) ++other;
    if (other < ranks) {
      out.mismatched.push_back({slots_[s].name, first, static_cast<int>(other), *c[first], *c[other]});
    } else if (absent_joined >= 0 && c[first]->kind != Kind::Allreduce) {
      out.refused.push_back({slots_[s].name, *c[first], absent_joined});
    } else {
      out.ready.push_back({slots_[s].name, *c[first]});
    }
  }
  evict(pending);
  return out;
}

// Drops the least recently used names pending nowhere until the table holds
// `capacity`; the table's order of slots is every rank's, so is the choice.
void NameTable::evict(const std::vector<bool>& pending) {
  while (by_name_.size() > capacity_) {
    int victim = -1;
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s].name.empty() || pending[s]) continue;
      if (victim < 0 || slots_[s].last_used < slots_[victim].last_used) victim = static_cast<int>(s);
    }
    if (victim < 0) return;  // every name is in flight somewhere: the table grows
    by_name_.erase(slots_[victim].name);
    slots_[victim].name.clear();
    free_.push_back(victim);
    std::sort(free_.begin(), free_.end(), std::greater<>());
  }
}

}  // namespace kolo::detail
