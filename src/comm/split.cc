// Communicator::split and subgroup: a communicator over some of this one's
// ranks. Every rank posts (color, key, digest of its rank list) with one
// allgather on the parent, so the split sits at one position of the parent's
// collective stream and a rank that diverges gets the usual mismatch error;
// every rank then sees the same table and reaches the same verdict. The
// members of each group connect through their own store connection under a
// key space of their own (<parent>/split<n>/<color>), as init() connects the
// world (connect.h). Communicator::group forms the same kind of communicator
// on its members alone, under a name they agree on (torch's new_group).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "collectives/backend.h"
#include "comm/connect.h"
#include "core/config.h"
#include "core/error.h"
#include "comm/context.h"

namespace kolo {

namespace {

// What each rank posts: its color (negative: none), key and list digest (0: split).
struct Ask {
  std::int64_t color, key, digest;
};
static_assert(sizeof(Ask) == 3 * sizeof(std::int64_t));

std::int64_t list_digest(const std::vector<int>& ranks) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the list
  for (int r : ranks) h = (h ^ static_cast<std::uint32_t>(r)) * 1099511628211ull;
  h = (h ^ ranks.size()) * 1099511628211ull;
  return static_cast<std::int64_t>(h >> 1 | 1);  // never 0 (split's)
}

void check_asks(const detail::Context& c, const std::vector<Ask>& all) {
  for (int q = 0; q < c.size; ++q) {
    const Ask& a = all[q];
    const Ask& me = all[c.rank];
    if ((a.digest == 0) != (me.digest == 0))
      fail("{} called {} while {} (this rank) called {}: every rank must make the same call", c.name(q),
           a.digest == 0 ? "split" : "subgroup", c.name(c.rank), me.digest == 0 ? "split" : "subgroup");
    if (a.digest != me.digest)
      fail("subgroup: {} passed another list of ranks than {} (this rank): every rank must pass the same list",
           c.name(q), c.name(c.rank));
  }
}

void check_list(const detail::Context& c, const std::vector<int>& ranks) {
  if (ranks.empty()) fail("subgroup: the list of ranks is empty");
  std::vector<bool> seen(c.size, false);
  for (int r : ranks) {
    if (r < 0 || r >= c.size) fail("subgroup: rank {} is not a rank of this communicator (size {})", r, c.size);
    if (seen[r]) fail("subgroup: rank {} is listed twice", r);
    seen[r] = true;
  }
}

}  // namespace

Communicator Communicator::subgroup(const std::vector<int>& ranks) {
  if (!ctx_) fail("this Communicator is not initialised; create it with kolo::init()");
  const auto it = std::find(ranks.begin(), ranks.end(), ctx_->rank);
  const bool in = it != ranks.end();
  return split_as(in ? 0 : kUndefined, in ? static_cast<int>(it - ranks.begin()) : 0, &ranks);
}

Communicator Communicator::split(int color, int key) { return split_as(color, key, nullptr); }

Communicator Communicator::split_as(int color, int key, const std::vector<int>* list) {
  if (!ctx_) fail("this Communicator is not initialised; create it with kolo::init()");
  detail::Context& p = *ctx_;
  const Ask mine{color < 0 ? -1 : color, key, list ? list_digest(*list) : 0};
  std::vector<Ask> all(static_cast<std::size_t>(p.size));
  allgather(&mine, all.data(), 3, DType::I64);
  check_asks(p, all);
  if (list) check_list(p, *list);
  const int n = p.splits++;
  if (mine.color < 0) return Communicator();

  std::vector<int> members;
  for (int q = 0; q < p.size; ++q)
    if (all[q].color == mine.color) members.push_back(q);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[a].key < all[b].key; });
  return form(members, fmt::format("{}/split{}/{}", p.prefix, n, mine.color));
}

Communicator Communicator::group(const std::vector<int>& ranks, const std::string& name) {
  if (!ctx_) fail("this Communicator is not initialised; create it with kolo::init()");
  detail::Context& p = *ctx_;
  check_list(p, ranks);
  if (std::find(ranks.begin(), ranks.end(), p.rank) == ranks.end())
    fail("group '{}': {} (this rank) is not in the list of ranks; only the listed ranks call group()", name,
         p.name(p.rank));
  if (name.empty() || name.find('/') != std::string::npos)
    fail("group: the name '{}' must be non-empty and hold no '/'", name);
  // The list's digest is part of the key space: members that passed other
  // lists meet nobody and time out naming the ranks they waited for, never
  // a group of crossed ranks.
  return form(ranks, fmt::format("{}/group/{}/{:x}", p.prefix, name, list_digest(ranks)));
}

Communicator Communicator::form(const std::vector<int>& members, const std::string& prefix) {
  detail::Context& p = *ctx_;
  auto c = std::make_shared<detail::Context>();
  c->parent = ctx_;
  c->size = static_cast<int>(members.size());
  c->rank = static_cast<int>(std::find(members.begin(), members.end(), p.rank) - members.begin());
  c->job_id = p.job_id;
  c->launcher = p.launcher;
  auto world = std::make_shared<std::vector<int>>();
  for (int q : members) world->push_back(p.world_rank(q));
  c->world = std::move(world);
  if (c->size == 1) {
    c->backend = collectives::make_self_backend();
  } else {
    c->prefix = prefix;
    c->store = p.store->connect_again(rdv::Millis(config::rendezvous_timeout_ms()),
                                      auth::Identity{c->world_rank(c->rank), 0, -1});
    detail::connect(*c);
  }
  Communicator sub;
  sub.ctx_ = std::move(c);
  return sub;
}

std::vector<int> Communicator::world_ranks() const {
  if (!ctx_) fail("this Communicator is not initialised; create it with kolo::init()");
  std::vector<int> r(ctx_->size);
  for (int q = 0; q < ctx_->size; ++q) r[q] = ctx_->world_rank(q);
  return r;
}

}  // namespace kolo
