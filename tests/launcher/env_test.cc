// What each rank is told through its environment and argv, and that
// concurrent jobs do not share a store, a job id or a secret.
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "launcher_test_util.h"

namespace kolotest {
namespace {


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

// torchrun's variables (tools/kolorun/torchrun_env.h) in a job on this host:
// what torchrun --nproc-per-node np would give, MASTER_* on a port of its own.
void expect_torchrun_env(const std::map<int, Vars>& by_rank, int np) {
  ASSERT_EQ(by_rank.size(), static_cast<std::size_t>(np));
  const Vars& first = by_rank.begin()->second;
  const std::string& store = first.at("KOLO_STORE_ADDR");
  EXPECT_EQ(first.at("MASTER_ADDR"), "127.0.0.1");
  EXPECT_TRUE(std::regex_match(first.at("MASTER_PORT"), std::regex(R"([1-9]\d*)"))) << first.at("MASTER_PORT");
  EXPECT_NE(first.at("MASTER_PORT"), store.substr(store.rfind(':') + 1)) << "MASTER_PORT is kolorun's store";
  const std::string n = std::to_string(np);
  for (int r = 0; r < np; ++r) {
    ASSERT_TRUE(by_rank.count(r)) << "no output tagged [" << r << "]";
    const Vars& v = by_rank.at(r);
    const std::string rank = std::to_string(r);
    const Vars want = {{"RANK", rank}, {"LOCAL_RANK", rank}, {"WORLD_SIZE", n}, {"LOCAL_WORLD_SIZE", n},
                       {"GROUP_RANK", "0"}, {"GROUP_WORLD_SIZE", "1"}, {"ROLE_RANK", rank},
                       {"ROLE_WORLD_SIZE", n}, {"ROLE_NAME", "default"},
                       {"TORCHELASTIC_RUN_ID", v.at("KOLO_JOB_ID")}, {"TORCHELASTIC_RESTART_COUNT", "0"},
                       {"TORCHELASTIC_MAX_RESTARTS", "0"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"},
                       {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", first.at("MASTER_PORT")}};
    for (const auto& [name, value] : want) EXPECT_EQ(v.at(name), value) << "rank " << r << ": " << name;
  }
}

TEST(Environment, EachRankGetsItsRankAndTheJobsSharedValues) {
  Outcome o = run_kolorun({"-np", "4", rank_prog(), "env"});
  ASSERT_EQ(o.code, 0) << o.err;
  expect_job_env(tagged_variables(o.out), 4);
  expect_torchrun_env(tagged_variables(o.out), 4);
}

TEST(Environment, InheritedKoloAndTorchrunVariablesAreReplaced) {
  // kolorun started from inside a rank of another job (kolorun's or torchrun's)
  // must not leak that job's identity.
  const Vars outer = {{"KOLO_RANK", "7"}, {"KOLO_JOB_ID", "outerjob"}, {"RANK", "7"}, {"LOCAL_RANK", "3"},
                      {"GROUP_RANK", "2"}, {"MASTER_ADDR", "outerhost"}, {"MASTER_PORT", "1"},
                      {"TORCHELASTIC_RUN_ID", "outer"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  for (const auto& [k, v] : outer) ::setenv(k.c_str(), v.c_str(), 1);
  Outcome o = run_kolorun({"-np", "2", rank_prog(), "env"});
  for (const auto& kv : outer) ::unsetenv(kv.first.c_str());
  ASSERT_EQ(o.code, 0) << o.err;
  expect_job_env(tagged_variables(o.out), 2);
  expect_torchrun_env(tagged_variables(o.out), 2);
}

TEST(Environment, MasterPortComesFromKoloPortRange) {
  // Where a firewall opens KOLO_PORT_RANGE only, rank 0's TCPStore must listen inside it.
  ::setenv("KOLO_PORT_RANGE", "47100-47199", 1);
  Outcome o = run_kolorun({"-np", "2", rank_prog(), "env"});
  ::unsetenv("KOLO_PORT_RANGE");
  ASSERT_EQ(o.code, 0) << o.err;
  auto by_rank = tagged_variables(o.out);
  expect_torchrun_env(by_rank, 2);
  const int port = std::stoi(by_rank[0].at("MASTER_PORT"));
  EXPECT_TRUE(port >= 47100 && port <= 47199) << "MASTER_PORT=" << port;
}

TEST(Environment, MasterPortIsBelowTheEphemeralRange) {
  // Outgoing connections take their local ports from the ephemeral range;
  // rank 0 binds MASTER_PORT seconds after kolorun chose it, so it lies below.
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (!(range >> low) || low <= 20000) GTEST_SKIP() << "no room below the ephemeral range " << low;
  Outcome o = run_kolorun({"-np", "1", rank_prog(), "env"});
  ASSERT_EQ(o.code, 0) << o.err;
  const int port = std::stoi(tagged_variables(o.out)[0].at("MASTER_PORT"));
  EXPECT_TRUE(port >= 20000 && port < low) << "MASTER_PORT=" << port << ", ephemeral ports from " << low;
}

TEST(Environment, ElasticWorkersGetNoTorchrunVariables) {
  // An elastic worker's rank changes without a restart (torchrun_env.h): it
  // gets none of torchrun's variables, and an outer job's are removed.
  TempDir dir;
  const std::string script = dir.file("discover.sh");
  std::ofstream(script) << "#!/bin/sh\necho localhost:1\n";
  ::chmod(script.c_str(), 0755);
  ::setenv("RANK", "5", 1);
  ::setenv("TORCHELASTIC_RUN_ID", "outer", 1);
  ::setenv("MASTER_PORT", "1", 1);
  Outcome o = run_kolorun({"--min-np", "1", "--max-np", "1", "--host-discovery-script", script, rank_prog(), "where",
                           "KOLO_WORKER_ID", "RANK", "TORCHELASTIC_RUN_ID", "MASTER_PORT", "MASTER_ADDR"});
  for (const char* k : {"RANK", "TORCHELASTIC_RUN_ID", "MASTER_PORT"}) ::unsetenv(k);
  ASSERT_EQ(o.code, 0) << o.err;
  const auto mine = with_prefix(split_lines(o.out), "[0] ");
  EXPECT_EQ(std::vector<std::string>(mine.begin() + 1, mine.end()),
            (std::vector<std::string>{"KOLO_WORKER_ID=localhost.0", "RANK unset", "TORCHELASTIC_RUN_ID unset",
                                      "MASTER_PORT unset", "MASTER_ADDR unset"}))
      << o.out;
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
  auto ea = tagged_variables(oa.out), eb = tagged_variables(ob.out);
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
    ids.insert(tagged_variables(o.out)[0]["KOLO_JOB_ID"]);
  }
  EXPECT_EQ(ids.size(), 3u);
}

}  // namespace
}  // namespace kolotest
