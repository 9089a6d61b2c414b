// Subgroups (Communicator::split / subgroup) as real processes under kolorun.
// Every rank checks its own results against values computed here from world
// ranks alone, and exits 1 on any failure, so kolorun's exit status is the
// verdict.
//
//   kolo_subgroups groups [--hosts "a a a b b b"]   (6 ranks)
//     world rank 5 joins no group; ranks 0..4 split by parity, ordered by
//     descending world rank: evens {4, 2, 0}, odds {3, 1}. Both groups run
//     every collective at the same time (sizes up to 2 MiB, so the chunked
//     and pipelined paths run too) while rank 5 waits in a world barrier:
//     a group's collectives never need a rank outside it. Then the evens
//     split again (nested): subgroup [2, 0] of the evens = world {0, 4}.
//     Each group checks its transport: KOLO_TRANSPORT=tcp gives tcp; else
//     members on one host share memory, members on several hosts use the
//     hierarchy where a host has two of them, TCP otherwise (--hosts gives
//     each world rank's emulated host, as as_host.sh sets it). Last, groups
//     formed by their members alone (Communicator::group): {5, 1} and
//     {0, 3, 4}, while world rank 2 calls nothing.
//   kolo_subgroups mismatch                         (4 ranks)
//     world rank 0 stays out of group {1, 2, 3}; inside it, group rank 1
//     (world rank 2) calls broadcast where the others call allreduce: each
//     group rank must get the mismatch error naming group and world ranks,
//     rank 0 nothing. Then every rank passes subgroup() a list, rank 3 a
//     different one: every rank gets that error. The world works on after
//     both (exact allreduce).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "../common/error_of.h"
#include "kolo/kolo.h"

namespace {

int failures = 0;
int world_rank = -1;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "world rank %d: FAILED %s\n", world_rank, what.c_str());
}

// The value world rank w contributes at element i: small integers, so that
// sums and products in f64 are exact.
double value(int w, std::size_t i) { return static_cast<double>((w + 1) * 3 + static_cast<int>(i % 7)); }

std::string expected_transport(const std::vector<int>& members, const std::vector<std::string>& host_of) {
  const char* forced = std::getenv("KOLO_TRANSPORT");
  if (forced && std::string(forced) == "tcp") return "tcp";
  std::vector<std::string> hosts;
  for (int w : members) hosts.push_back(host_of.empty() ? "" : host_of[w]);
  std::vector<std::string> distinct = hosts;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (distinct.size() == 1) return "shm";
  const char* hier = std::getenv("KOLO_HIERARCHICAL");
  bool two_on_a_host = false;
  for (const auto& h : distinct) two_on_a_host |= std::count(hosts.begin(), hosts.end(), h) > 1;
  return (!hier || std::string(hier) != "0") && two_on_a_host ? "hier" : "tcp";
}

// Every collective on group g, whose world ranks are `members`, checked exactly.
void exercise(kolo::Communicator& g, const std::vector<int>& members, const std::string& tag) {
  const int n = g.size(), me = g.rank();
  expect(g.world_ranks() == members, fmt::format("{}: world_ranks {} != {}", tag, g.world_ranks(), members));
  expect(members[me] == world_rank, fmt::format("{}: group rank {} is not world rank {}", tag, me, world_rank));
  for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{300000}}) {
    const std::string at = fmt::format("{} count {}", tag, count);
    std::vector<double> x(count);
    for (std::size_t i = 0; i < count; ++i) x[i] = value(world_rank, i);
    std::vector<double> sum = x;
    g.allreduce(sum.data(), count, kolo::Op::Sum);
    std::vector<double> mx(count);
    kolo::Work w = g.allreduce_async(x.data(), mx.data(), count, kolo::DType::F64, kolo::Op::Max);
    bool ok = true;
    for (std::size_t i = 0; i < count && ok; ++i) {
      double s = 0;
      for (int q : members) s += value(q, i);
      ok = sum[i] == s;
    }
    expect(ok, at + ": allreduce sum");
    w.wait();
    ok = true;
    for (std::size_t i = 0; i < count && ok; ++i) {
      double m = 0;
      for (int q : members) m = std::max(m, value(q, i));
      ok = mx[i] == m;
    }
    expect(ok, at + ": allreduce_async max");

    std::vector<double> b = x;
    const int root = n - 1;
    g.broadcast(b.data(), count, root);
    ok = true;
    for (std::size_t i = 0; i < count && ok; ++i) ok = b[i] == value(members[root], i);
    expect(ok, at + ": broadcast");

    std::vector<double> all(count * n);
    g.allgather(x, all);
    ok = true;
    for (int q = 0; q < n; ++q)
      for (std::size_t i = 0; i < count && ok; ++i) ok = all[q * count + i] == value(members[q], i);
    expect(ok, at + ": allgather");

    std::vector<double> rs(count);
    g.reduce_scatter(all, rs);  // block me of sum over ranks of `all`, which every rank holds equal
    ok = true;
    for (std::size_t i = 0; i < count && ok; ++i) ok = rs[i] == n * value(members[me], i);
    expect(ok, at + ": reduce_scatter");

    std::vector<double> a2a_in(count * n), a2a_out(count * n);
    for (int q = 0; q < n; ++q)
      for (std::size_t i = 0; i < count; ++i) a2a_in[q * count + i] = value(world_rank, i) * 100 + members[q];
    g.alltoall(a2a_in, a2a_out);
    ok = true;
    for (int q = 0; q < n; ++q)
      for (std::size_t i = 0; i < count && ok; ++i) ok = a2a_out[q * count + i] == value(members[q], i) * 100 + world_rank;
    expect(ok, at + ": alltoall");
  }
  g.barrier();
}

void world_check(kolo::Communicator& world, const std::string& tag) {
  std::vector<double> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = value(world_rank, i);
  world.allreduce(v.data(), v.size(), kolo::Op::Sum);
  bool ok = true;
  for (std::size_t i = 0; i < v.size() && ok; ++i) {
    double s = 0;
    for (int q = 0; q < world.size(); ++q) s += value(q, i);
    ok = v[i] == s;
  }
  expect(ok, tag + ": world allreduce");
}

void groups(kolo::Communicator& world, const std::vector<std::string>& host_of) {
  expect(world.size() == 6, "groups needs 6 ranks");
  const int r = world.rank();
  kolo::Communicator g = world.split(r == 5 ? kolo::kUndefined : r % 2, -r);
  if (r == 5) {
    expect(!g.valid(), "rank 5 joined a group");
  } else {
    const std::vector<int> members = r % 2 == 0 ? std::vector<int>{4, 2, 0} : std::vector<int>{3, 1};
    expect(g.valid() && g.size() == static_cast<int>(members.size()), "group size");
    const std::string want = expected_transport(members, host_of);
    expect(g.transport() == want, fmt::format("group {}: transport {}, expected {}", members, g.transport(), want));
    exercise(g, members, fmt::format("group {}", members));
    // Nested: the evens' ranks 2 and 0 (world 0 and 4); the odds make theirs
    // by split, keyed so that their order flips.
    kolo::Communicator nested = r % 2 == 0 ? g.subgroup({2, 0}) : g.split(7, g.rank() == 0 ? 1 : 0);
    const std::vector<int> inner = r % 2 == 0 ? std::vector<int>{0, 4} : std::vector<int>{1, 3};
    if (r == 2) {
      expect(!nested.valid(), "world rank 2 joined the nested group");
    } else {
      const std::string want_inner = expected_transport(inner, host_of);
      expect(nested.valid() && nested.transport() == want_inner,
             fmt::format("nested {}: transport {}, expected {}", inner, nested.valid() ? nested.transport() : "-", want_inner));
      exercise(nested, inner, fmt::format("nested {}", inner));
    }
    exercise(g, members, fmt::format("group {} after nesting", members));
  }
  // Members only (torch's new_group): {5, 1} and {0, 3, 4} form their groups
  // with no call on rank 2, which goes straight to the world barrier.
  if (r != 2) {
    const std::vector<int> members = (r == 5 || r == 1) ? std::vector<int>{5, 1} : std::vector<int>{0, 3, 4};
    kolo::Communicator m = world.group(members, r == 5 || r == 1 ? "pair" : "trio");
    expect(m.valid() && m.size() == static_cast<int>(members.size()), "members-only group size");
    exercise(m, members, fmt::format("members-only group {}", members));
  }
  world.barrier();
  world_check(world, "after the groups");
}

using kolo::test::error_of;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void mismatch(kolo::Communicator& world) {
  expect(world.size() == 4, "mismatch needs 4 ranks");
  const int r = world.rank();
  kolo::Communicator g = world.subgroup({1, 2, 3});
  if (r == 0) {
    expect(!g.valid(), "rank 0 joined the group");
  } else {
    std::vector<float> f(1000, 1.0f);
    g.allreduce(f.data(), f.size(), kolo::Op::Sum);
    const std::string e = error_of([&] {
      if (g.rank() == 1) g.broadcast(f.data(), f.size(), kolo::DType::F32, 0);
      else g.allreduce(f.data(), f.size(), kolo::Op::Sum);
    });
    // A rank that detected the mismatch words it itself; the others are
    // told by it ("... failed and left the collective: <its error>").
    expect(has(e, "mismatched collectives at collective #2") && has(e, "rank 1 (world rank 2)") &&
               has(e, "broadcast(f32, 1000, root=0)") && has(e, "allreduce(f32, 1000, sum)"),
           "mismatch error: " + e);
  }
  world_check(world, "after the mismatch in the group");

  std::vector<int> list = {0, 1};
  if (r == 3) list = {0, 2};
  const std::string e = error_of([&] { world.subgroup(list); });
  expect(has(e, "subgroup: rank ") && has(e, "passed another list of ranks than"), "different lists: " + e);
  world_check(world, "after the different lists");

}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "groups";
  std::vector<std::string> host_of;
  if (argc > 3 && std::string(argv[2]) == "--hosts") {
    std::istringstream in(argv[3]);
    for (std::string h; in >> h;) host_of.push_back(h);
  }
  try {
    kolo::Communicator world = kolo::init();
    world_rank = world.rank();
    if (mode == "groups") groups(world, host_of);
    else if (mode == "mismatch") mismatch(world);
    else expect(false, "unknown mode " + mode);
    world.barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "world rank %d: FAILED with %s\n", world_rank, e.what());
    return 1;
  }
  if (failures == 0) std::printf("world rank %d: subgroups %s passed\n", world_rank, mode.c_str());
  return failures == 0 ? 0 : 1;
}
