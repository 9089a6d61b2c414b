// The name table's rounds (engine/name_table.h), without processes: what a
// round decides from every rank's announcement, and that the response cache
// turns a repeated name into one bit.
#include <gtest/gtest.h>

#include "engine/name_table.h"

namespace kolo::detail {
namespace {

Announce ann(const std::string& name, std::size_t count) { return {name, fingerprint(Kind::Allreduce, DType::F32, count)}; }

std::vector<std::string> names(const Settled& s) {
  std::vector<std::string> out;
  for (const auto& r : s.ready) out.push_back(r.name);
  return out;
}

std::vector<std::uint64_t> bits(const NameTable& t, const std::vector<std::string>& names) {
  std::vector<std::uint64_t> b(t.words(), 0);
  for (const auto& n : names) {
    const int s = t.slot(n);
    b[s / 64] |= std::uint64_t{1} << (s % 64);
  }
  return b;
}

TEST(NameTable, ReadyOnlyWhenEveryRankIssuedInOneOrderForAll) {
  NameTable t(16);
  // Rank 0 issued a, b; rank 1 b, c (in its order).
  auto s = t.settle({{{}, {ann("a", 1), ann("b", 2)}}, {{}, {ann("b", 2), ann("c", 3)}}});
  ASSERT_EQ(names(s), std::vector<std::string>{"b"});
  ASSERT_EQ(s.waiting.size(), 2u);
  EXPECT_EQ(s.waiting[0].name, "a");
  EXPECT_EQ(s.waiting[0].issued, (std::vector<bool>{true, false}));
  EXPECT_EQ(s.waiting[1].name, "c");
  // Slots in rank order, each rank's names in its order.
  EXPECT_EQ(t.slot("a"), 0);
  EXPECT_EQ(t.slot("b"), 1);
  EXPECT_EQ(t.slot("c"), 2);
  // Next round: a and c by bit from the ranks that had them, in full from the others.
  s = t.settle({{bits(t, {"a"}), {ann("c", 3)}}, {bits(t, {"c"}), {ann("a", 1)}}});
  EXPECT_EQ(names(s), (std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(s.waiting.empty());
}

TEST(NameTable, RepeatedStepIsBitsOnlyAndSameOrderOnEveryRank) {
  NameTable t0(16), t1(16);
  std::vector<RankRound> first{{{}, {ann("x", 1), ann("y", 1)}}, {{}, {ann("y", 1), ann("x", 1)}}};
  auto s0 = t0.settle(first), s1 = t1.settle(first);
  EXPECT_EQ(names(s0), names(s1));
  EXPECT_EQ(names(s0), (std::vector<std::string>{"x", "y"}));
  std::vector<RankRound> again{{bits(t0, {"y", "x"}), {}}, {bits(t1, {"x", "y"}), {}}};
  s0 = t0.settle(again);
  EXPECT_EQ(names(s0), (std::vector<std::string>{"x", "y"}));
}

TEST(NameTable, OneNameTwoCallsIsAMismatchNamingBoth) {
  NameTable t(16);
  auto s = t.settle({{{}, {ann("g", 10)}}, {{}, {ann("g", 9)}}});
  EXPECT_TRUE(s.ready.empty());
  ASSERT_EQ(s.mismatched.size(), 1u);
  EXPECT_EQ(s.mismatched[0].name, "g");
  EXPECT_EQ(s.mismatched[0].first_fp.count, 10u);
  EXPECT_EQ(s.mismatched[0].second_fp.count, 9u);
  // A rank whose call differs from the cached one announces it in full: still caught.
  s = t.settle({{bits(t, {"g"}), {}}, {{}, {ann("g", 9)}}});
  ASSERT_EQ(s.mismatched.size(), 1u);
}

TEST(NameTable, EvictsTheLeastRecentlyUsedNamePendingNowhere) {
  NameTable t(2);
  t.settle({{{}, {ann("a", 1)}}, {{}, {ann("a", 1)}}});
  t.settle({{{}, {ann("b", 1)}}, {{}, {ann("b", 1)}}});
  t.settle({{{}, {ann("c", 1)}}, {{}, {}}});  // c pending on rank 0: a (oldest) goes
  EXPECT_EQ(t.slot("a"), -1);
  EXPECT_EQ(t.names(), 2u);
  EXPECT_GE(t.slot("c"), 0);
  // The freed slot is reused, so the bitset does not grow.
  auto s = t.settle({{bits(t, {"c"}), {ann("d", 1)}}, {{}, {ann("c", 1), ann("d", 1)}}});
  EXPECT_EQ(s.ready.size(), 2u);
  EXPECT_EQ(t.words(), 1u);
}

TEST(NameTable, AJoinedRankTakesPartInAllreducesOnlyOthersAreRefused) {
  NameTable t(16);
  Announce b{"b", fingerprint(Kind::Broadcast, DType::F32, 3, Op::Sum, 0)};
  // Rank 1 has joined: rank 0's allreduce runs, its broadcast is refused.
  auto s = t.settle({{{}, {ann("a", 5), b}}, {{}, {}}}, {false, true});
  ASSERT_EQ(names(s), std::vector<std::string>{"a"});
  EXPECT_EQ(s.ready[0].call.count, 5u);
  ASSERT_EQ(s.refused.size(), 1u);
  EXPECT_EQ(s.refused[0].name, "b");
  EXPECT_EQ(s.refused[0].joined, 1);
  // Not joined: both wait for rank 1.
  s = t.settle({{bits(t, {"a"}), {}}, {{}, {}}});
  EXPECT_TRUE(s.ready.empty());
  EXPECT_EQ(s.waiting.size(), 1u);
}

}  // namespace
}  // namespace kolo::detail
