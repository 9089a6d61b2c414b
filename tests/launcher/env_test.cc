// What each rank is told through its environment and argv, and that
// concurrent jobs do not share a store, a job id or a secret.
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "launcher_test_util.h"

namespace kolotest {
namespace {

using Vars = std::map<std::string, std::string>;

// "[r] NAME=value" lines -> one map per rank tag.
std::map<int, Vars> parse_tagged_env(const std::string& out) {
  std::map<int, Vars> by_rank;
  static const std::regex line_re(R"(\[(\d+)\] ([A-Za-z_]+)=(.*))");
  for (const auto& line : split_lines(out)) {
    std::smatch m;
    if (std::regex_match(line, m, line_re)) by_rank[std::stoi(m[1])][m[2]] = m[3];
  }
  return by_rank;
}

bool is_hex(const std::string& s, std::size_t n) {
  return s.size() == n && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

void expect_job_env(const std::map<int, Vars>& by_rank, int np) {
  ASSERT_EQ(by_rank.size(), static_cast<std::size_t>(np));
  const Vars& first = by_rank.begin()->second;
  EXPECT_TRUE(std::regex_match(first.at("KOLO_STORE_ADDR"), std::regex(R"(127\.0\.0\.1:[1-9]\d*)")))
      << first.at("KOLO_STORE_ADDR");
  EXPECT_TRUE(is_hex(first.at("KOLO_JOB_ID"), 16)) << first.at("KOLO_JOB_ID");
  EXPECT_TRUE(is_hex(first.at("KOLO_SECRET"), 32)) << first.at("KOLO_SECRET");
  for (int r = 0; r < np; ++r) {
    ASSERT_TRUE(by_rank.count(r)) << "no output tagged [" << r << "]";
    const Vars& v = by_rank.at(r);
    EXPECT_EQ(v.at("KOLO_RANK"), std::to_string(r));  // the tag and the variable agree
    EXPECT_EQ(v.at("KOLO_SIZE"), std::to_string(np));
    EXPECT_EQ(v.at("KOLO_LOCAL_RANK"), std::to_string(r));
    EXPECT_EQ(v.at("KOLO_LOCAL_SIZE"), std::to_string(np));
    EXPECT_EQ(v.at("KOLO_STORE_ADDR"), first.at("KOLO_STORE_ADDR"));
    EXPECT_EQ(v.at("KOLO_JOB_ID"), first.at("KOLO_JOB_ID"));
    EXPECT_EQ(v.at("KOLO_SECRET"), first.at("KOLO_SECRET"));
    EXPECT_EQ(v.at("stdin"), "/dev/null");
    EXPECT_EQ(v.at("pgid_is_pid"), "1") << "rank " << r << " does not lead its own process group";
  }
}

TEST(Environment, EachRankGetsItsRankAndTheJobsSharedValues) {
  Outcome o = run_kolorun({"-np", "4", rank_prog(), "env"});
  ASSERT_EQ(o.code, 0) << o.err;
  expect_job_env(parse_tagged_env(o.out), 4);
}

TEST(Environment, InheritedKoloVariablesAreReplaced) {
  // kolorun started from inside a rank of another job must not leak that job's identity.
  ::setenv("KOLO_RANK", "7", 1);
  ::setenv("KOLO_JOB_ID", "outerjob", 1);
  Outcome o = run_kolorun({"-np", "2", rank_prog(), "env"});
  ::unsetenv("KOLO_RANK");
  ::unsetenv("KOLO_JOB_ID");
  ASSERT_EQ(o.code, 0) << o.err;
  expect_job_env(parse_tagged_env(o.out), 2);
}

TEST(Environment, ArgumentsAfterTheCommandArePassedUntouched) {
  Outcome o = run_kolorun({"-np", "2", rank_prog(), "args", "-np", "5", "--foo", "--", "--timeout", "x y"});
  ASSERT_EQ(o.code, 0) << o.err;
  const std::vector<std::string> want{"arg: -np", "arg: 5", "arg: --foo", "arg: --", "arg: --timeout", "arg: x y"};
  auto out = split_lines(o.out);
  EXPECT_EQ(with_prefix(out, "[0] "), want);
  EXPECT_EQ(with_prefix(out, "[1] "), want);
}

TEST(Environment, DoubleDashEndsKolorunsOptions) {
  Outcome o = run_kolorun({"-np", "1", "--", rank_prog(), "args", "--help"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "[0] arg: --help\n");
}

TEST(Environment, ConcurrentJobsBothSucceedWithTheirOwnStoreAndIds) {
  // Every rank of both jobs waits until all 4 ranks have started, so the two
  // jobs (and their stores) are alive at the same time.
  TempDir dir;
  Kolorun a({"-np", "2", rank_prog(), "barrier", dir.path, "4"});
  Kolorun b({"-np", "2", rank_prog(), "barrier", dir.path, "4"});
  Outcome oa = a.wait(), ob = b.wait();
  ASSERT_EQ(oa.code, 0) << oa.err;
  ASSERT_EQ(ob.code, 0) << ob.err;
  auto ea = parse_tagged_env(oa.out), eb = parse_tagged_env(ob.out);
  expect_job_env(ea, 2);
  expect_job_env(eb, 2);
  EXPECT_NE(ea[0]["KOLO_STORE_ADDR"], eb[0]["KOLO_STORE_ADDR"]);
  EXPECT_NE(ea[0]["KOLO_JOB_ID"], eb[0]["KOLO_JOB_ID"]);
  EXPECT_NE(ea[0]["KOLO_SECRET"], eb[0]["KOLO_SECRET"]);
}

TEST(Environment, SequentialJobsGetDifferentJobIds) {
  std::set<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    Outcome o = run_kolorun({"-np", "1", rank_prog(), "env"});
    ASSERT_EQ(o.code, 0) << o.err;
    ids.insert(parse_tagged_env(o.out)[0]["KOLO_JOB_ID"]);
  }
  EXPECT_EQ(ids.size(), 3u);
}

}  // namespace
}  // namespace kolotest
