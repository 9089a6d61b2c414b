// kolorun -H / --hostfile without other machines: host lists and hostfiles,
// their usage errors, the launching host's ranks (started by a local agent),
// and the remote path through --rsh commands that run the "remote" command
// on this machine (a fake ssh), so that the agent, its frames and the
// unreachable-host check run without root or sshd. Real hosts:
// tests/multihost/kolorun_*.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "launcher_test_util.h"

namespace kolotest {
namespace {

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// "rank=R local=L/S host=H cwd=D" lines of `where`, by rank (tag removed).
std::map<int, std::string> where_lines(const std::string& out) {
  std::map<int, std::string> by_rank;
  static const std::regex line(R"(^\[(\d+)\] (rank=\d+ local=\S+ host=\S+ cwd=\S+)$)");
  for (const auto& l : split_lines(out)) {
    std::smatch m;
    if (std::regex_match(l, m, line)) by_rank[std::stoi(m[1])] = m[2];
  }
  return by_rank;
}

std::string where(int rank, int local, int local_size, const std::string& host, const std::string& cwd) {
  return "rank=" + std::to_string(rank) + " local=" + std::to_string(local) + "/" + std::to_string(local_size) +
         " host=" + host + " cwd=" + cwd;
}

std::string cwd() {
  char buf[4096];
  return ::getcwd(buf, sizeof buf) != nullptr ? buf : "?";
}

// --rsh for a "remote" host that is this machine: `sh -c 'exec sh -c "$2"'
// rsh HOST COMMAND` runs COMMAND here, as ssh would run it there.
const std::string kFakeRsh = R"(sh -c 'exec sh -c "$2"' fake-rsh)";
// A host that cannot be reached, with a message on stderr as ssh prints one.
const std::string kDeadRsh = R"(sh -c 'echo "ssh: connect to host $1 port 22: No route to host" >&2; exit 255' dead-rsh)";

struct BadHosts {
  const char* name;
  std::vector<std::string> args;
  std::string message;  // kolorun's stderr starts with this
};

void PrintTo(const BadHosts& b, std::ostream* os) { *os << b.name; }

class HostUsage : public testing::TestWithParam<BadHosts> {};

TEST_P(HostUsage, ExitsTwoWithAClearMessage) {
  const BadHosts& b = GetParam();
  Outcome o = run_kolorun(b.args);
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err.rfind(b.message, 0), 0u) << "stderr: " << o.err;
}

INSTANTIATE_TEST_SUITE_P(
    Launcher, HostUsage,
    testing::Values(
        BadHosts{"np_above_slots", {"-np", "5", "-H", "localhost:2,127.0.0.1:2", "true"},
                 "kolorun: -np 5 is more than the 4 slots of -H localhost:2,127.0.0.1:2\n"},
        BadHosts{"zero_slots", {"-H", "localhost:0", "true"},
                 "kolorun: -H entry 'localhost:0': the slot count must be a positive integer, got '0'\n"},
        BadHosts{"slots_not_a_number", {"-H", "a:2,b:x", "true"},
                 "kolorun: -H entry 'b:x': the slot count must be a positive integer, got 'x'\n"},
        BadHosts{"empty_entry", {"-H", "a:2,,b", "true"}, "kolorun: -H entry '': empty host name\n"},
        BadHosts{"option_as_host", {"-H", "-oProxyCommand=x", "true"},
                 "kolorun: -H entry '-oProxyCommand=x': '-oProxyCommand=x' is not a host name\n"},
        BadHosts{"both_lists", {"-H", "localhost", "--hostfile", "/dev/null", "true"},
                 "kolorun: give either -H or --hostfile, not both\n"},
        BadHosts{"missing_hostfile", {"--hostfile", "/nonexistent/hosts", "true"},
                 "kolorun: cannot read hostfile '/nonexistent/hosts': No such file or directory\n"},
        BadHosts{"empty_hostfile", {"--hostfile", "/dev/null", "true"}, "kolorun: hostfile '/dev/null' names no host\n"},
        BadHosts{"port_without_hosts", {"-np", "1", "-p", "2222", "true"},
                 "kolorun: --port applies to remote hosts, given with -H or --hostfile\n"},
        BadHosts{"bad_port", {"-H", "localhost", "-p", "70000", "true"},
                 "kolorun: -p must be a port number (1-65535), got 70000\n"},
        BadHosts{"x_unset", {"-np", "1", "-x", "KOLO_TEST_SURELY_UNSET", "true"},
                 "kolorun: -x KOLO_TEST_SURELY_UNSET: KOLO_TEST_SURELY_UNSET is not set in kolorun's environment "
                 "(use -x KOLO_TEST_SURELY_UNSET=value)\n"},
        BadHosts{"x_bad_name", {"-np", "1", "-x", "1A=b", "true"}, "kolorun: -x 1A=b: '1A' is not a variable name\n"},
        BadHosts{"port_with_other_rsh", {"-H", "localhost", "-p", "22", "--rsh", "rsh", "true"},
                 "kolorun: -p and -i are options of ssh; 'rsh' is not ssh: give its own options in --rsh\n"},
        BadHosts{"no_such_interface", {"-H", "localhost", "--network-interface", "nosuch0", "true"},
                 "kolorun: --network-interface nosuch0: this host has no interface of that name with an IPv4 "
                 "address; its interfaces: "},
        BadHosts{"cidr_without_address", {"-H", "localhost", "--network-interface", "198.51.100.0/24", "true"},
                 "kolorun: --network-interface 198.51.100.0/24: this host has no IPv4 address in that network"},
        BadHosts{"malformed_cidr", {"-H", "localhost", "--network-interface", "10.0.0.0/99", "true"},
                 "kolorun: --network-interface 10.0.0.0/99 is neither an interface name nor an IPv4 CIDR such as "
                 "10.0.0.0/24"},
        BadHosts{"missing_program_here", {"-H", "localhost:2", "nosuchprog"},
                 "kolorun: cannot execute 'nosuchprog': No such file or directory\n"}),
    [](const testing::TestParamInfo<BadHosts>& i) { return std::string(i.param.name); });

TEST(HostFile, LineErrorsNameFileAndLine) {
  TempDir dir;
  const std::string path = dir.file("hosts");
  std::ofstream(path) << "# comment\nlocalhost slots=2\nlocalhost slots=two\n";
  Outcome o = run_kolorun({"--hostfile", path, "true"});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "kolorun: hostfile '" + path + "' line 3: the slot count must be a positive integer, got 'two'\n");
  std::ofstream(path) << "localhost slots=2 cpus=4\n";
  o = run_kolorun({"--hostfile", path, "true"});
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "kolorun: hostfile '" + path + "' line 1: unexpected 'cpus=4' (expected 'host slots=N')\n");
}

TEST(LocalHosts, RanksFillHostsInOrderAndNpDefaultsToAllSlots) {
  // Three spellings of this machine: one host of 2 + 1 + 1 ranks.
  Outcome o = run_kolorun({"-H", "localhost:2," + hostname() + ",127.0.0.1", rank_prog(), "where"});
  EXPECT_EQ(o.code, 0) << o.err;
  auto w = where_lines(o.out);
  ASSERT_EQ(w.size(), 4u) << o.out;
  for (int r = 0; r < 4; ++r) EXPECT_EQ(w[r], where(r, r, 4, hostname(), cwd()));
}

TEST(LocalHosts, HostfileFormsAndFewerRanksThanSlots) {
  TempDir dir;
  const std::string path = dir.file("hosts");
  std::ofstream(path) << "# the launching host, three ways\n"
                         "localhost slots=2   # trailing comment\n"
                         "\n"
                         "127.0.0.1:3 max_slots=8\n" +
                             hostname() + "\n";
  Outcome o = run_kolorun({"-np", "3", "--hostfile", path, rank_prog(), "where"});
  EXPECT_EQ(o.code, 0) << o.err;
  auto w = where_lines(o.out);
  ASSERT_EQ(w.size(), 3u) << o.out;
  for (int r = 0; r < 3; ++r) EXPECT_EQ(w[r], where(r, r, 3, hostname(), cwd()));
  o = run_kolorun({"--hostfile", path, rank_prog(), "where"});
  EXPECT_EQ(where_lines(o.out).size(), 6u) << o.out;
}

TEST(LocalHosts, VariablesStoreAndExportedEnvironment) {
  ::setenv("KOLO_TEST_PASSED", "from kolorun", 1);
  Outcome o = run_kolorun({"-H", "localhost:2", "-x", "KOLO_TEST_PASSED", "-x", "KOLO_TEST_SET=a=b c", rank_prog(),
                           "where", "KOLO_TEST_PASSED", "KOLO_TEST_SET", "KOLO_STORE_ADDR", "KOLO_SIZE"});
  ::unsetenv("KOLO_TEST_PASSED");
  EXPECT_EQ(o.code, 0) << o.err;
  const auto lines = split_lines(o.out);
  for (int r = 0; r < 2; ++r) {
    const auto mine = with_prefix(lines, "[" + std::to_string(r) + "] ");
    auto has = [&](const std::string& l) { return std::find(mine.begin(), mine.end(), l) != mine.end(); };
    EXPECT_TRUE(has("KOLO_TEST_PASSED=from kolorun")) << o.out;
    EXPECT_TRUE(has("KOLO_TEST_SET=a=b c")) << o.out;
    EXPECT_TRUE(has("KOLO_SIZE=2")) << o.out;
    // Every rank here: the store stays on loopback.
    EXPECT_TRUE(std::any_of(mine.begin(), mine.end(),
                            [](const std::string& l) { return l.rfind("KOLO_STORE_ADDR=127.0.0.1:", 0) == 0; }))
        << o.out;
  }
}

TEST(LocalHosts, FailingRankIsNamedWithItsHostAndItsCodeIsKolorunsExit) {
  Outcome o = run_kolorun({"-H", "localhost:3", rank_prog(), "exit", "7", "2"});
  EXPECT_EQ(o.code, 7);
  EXPECT_TRUE(contains(o.err, "kolorun: rank 2 on localhost exited with code 7 (first failure)")) << o.err;
}

TEST(LocalHosts, OutputDirHoldsEveryRanksStreams) {
  TempDir dir;
  Outcome o = run_kolorun({"-H", "localhost:2", "--output-dir", dir.path, rank_prog(), "lines", "2"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "");
  for (int r = 0; r < 2; ++r) {
    const std::string R = std::to_string(r);
    EXPECT_EQ(read_file(dir.file("rank." + R + ".stdout")), "out " + R + " 0\nout " + R + " 1\n");
    EXPECT_EQ(read_file(dir.file("rank." + R + ".stderr")), "err " + R + " 0\nerr " + R + " 1\n");
  }
}

TEST(LocalHosts, SigintStopsRanksAndTheirChildren) {
  TempDir dir;
  Kolorun k({"-H", "localhost:3", rank_prog(), "sleep", dir.path, "--grandchild"});
  auto ranks = wait_for_pids(dir.path, "rank", 3);
  auto grandchildren = wait_for_pids(dir.path, "grandchild", 3);
  ASSERT_EQ(::kill(k.pid(), SIGINT), 0);
  Outcome o = k.wait(20);
  EXPECT_EQ(o.code, 130);
  EXPECT_TRUE(contains(o.err, "kolorun: interrupted (SIGINT); stopping 3 ranks on 1 host\n")) << o.err;
  for (pid_t p : ranks) EXPECT_TRUE(gone_within(p, 10)) << "rank pid " << p;
  for (pid_t p : grandchildren) EXPECT_TRUE(gone_within(p, 10)) << "grandchild pid " << p;
  kill_leftovers(ranks);
  kill_leftovers(grandchildren);
}

// The remote path through a fake ssh: "nodea" and "nodeb" do not resolve, so
// they are remote; the store's address comes from --network-interface lo.
TEST(FakeRemoteHosts, AgentsStartRanksRelayOutputAndReportExits) {
  Outcome o = run_kolorun({"-H", "localhost:1,nodea:2,nodeb:1", "--rsh", kFakeRsh, "--network-interface", "lo", "-x",
                           "KOLO_TEST_SET=remote", rank_prog(), "where", "KOLO_TEST_SET", "KOLO_IFACE"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.err, "");
  auto w = where_lines(o.out);
  ASSERT_EQ(w.size(), 4u) << o.out;
  EXPECT_EQ(w[0], where(0, 0, 1, hostname(), cwd()));
  EXPECT_EQ(w[1], where(1, 0, 2, hostname(), cwd()));
  EXPECT_EQ(w[2], where(2, 1, 2, hostname(), cwd()));
  EXPECT_EQ(w[3], where(3, 0, 1, hostname(), cwd()));
  const auto lines = split_lines(o.out);
  for (int r = 0; r < 4; ++r) {
    const auto mine = with_prefix(lines, "[" + std::to_string(r) + "] ");
    EXPECT_NE(std::find(mine.begin(), mine.end(), "KOLO_TEST_SET=remote"), mine.end()) << o.out;
    EXPECT_NE(std::find(mine.begin(), mine.end(), "KOLO_IFACE=lo"), mine.end()) << o.out;
  }

  o = run_kolorun({"-H", "nodea:2,nodeb:2", "--rsh", kFakeRsh, "--network-interface", "127.0.0.0/8", rank_prog(),
                   "exit", "9", "3"});
  EXPECT_EQ(o.code, 9);
  EXPECT_TRUE(contains(o.err, "kolorun: rank 3 on nodeb exited with code 9 (first failure)")) << o.err;
}

// This machine's first non-loopback IPv4 address ("" if it has none): an
// address that --network-interface can name and that is not loopback, so that
// MASTER_ADDR visibly comes from it.
std::string non_loopback_ipv4() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string ip;
  for (ifaddrs* i = list; i != nullptr && ip.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK)) continue;
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    ip = buf;
  }
  ::freeifaddrs(list);
  return ip;
}

// torchrun's variables across hosts (tools/kolorun/torchrun_env.h): GROUP_RANK
// is the host's index, MASTER_ADDR:MASTER_PORT one endpoint on rank 0's host
// (chosen by its agent, also when that host is not the launching one).
TEST(FakeRemoteHosts, TorchrunVariablesNameRankZerosHost) {
  const std::string ip = non_loopback_ipv4();
  const std::string iface = ip.empty() ? "lo" : ip + "/32", master = ip.empty() ? "127.0.0.1" : ip;
  const std::vector<std::string> names = {"RANK",      "LOCAL_RANK",  "WORLD_SIZE",          "LOCAL_WORLD_SIZE",
                                          "GROUP_RANK", "GROUP_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "KOLO_JOB_ID",
                                          "MASTER_ADDR", "MASTER_PORT"};
  struct Layout {
    std::string hosts;
    std::vector<int> local_rank, local_size, group;
    std::string master_addr;
  };
  const Layout layouts[] = {
      {"localhost:1,nodea:2,nodeb:1", {0, 0, 1, 0}, {1, 2, 2, 1}, {0, 1, 1, 2}, master},
      {"nodea:2,nodeb:2", {0, 1, 0, 1}, {2, 2, 2, 2}, {0, 0, 1, 1}, master},  // rank 0 not on this host
      {"nodea:3", {0, 1, 2}, {3, 3, 3}, {0, 0, 0}, "127.0.0.1"},             // one host: loopback
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE("-H " + l.hosts);
    std::vector<std::string> args = {"-H", l.hosts, "--rsh", kFakeRsh, "--network-interface", iface, rank_prog(),
                                     "where"};
    args.insert(args.end(), names.begin(), names.end());
    Outcome o = run_kolorun(args);
    ASSERT_EQ(o.code, 0) << o.err;
    auto v = tagged_variables(o.out);
    for (auto& [rank, vars] : v) vars.erase("rank");  // where's "rank=R local=..." line
    const int np = static_cast<int>(l.group.size());
    ASSERT_EQ(v.size(), l.group.size()) << o.out;
    const std::string port = v[0]["MASTER_PORT"];
    EXPECT_TRUE(std::regex_match(port, std::regex(R"([1-9]\d*)"))) << o.out;
    const int hosts = l.group.back() + 1;
    for (int r = 0; r < np; ++r) {
      const Vars want = {{"RANK", std::to_string(r)},
                         {"LOCAL_RANK", std::to_string(l.local_rank[r])},
                         {"WORLD_SIZE", std::to_string(np)},
                         {"LOCAL_WORLD_SIZE", std::to_string(l.local_size[r])},
                         {"GROUP_RANK", std::to_string(l.group[r])},
                         {"GROUP_WORLD_SIZE", std::to_string(hosts)},
                         {"TORCHELASTIC_RUN_ID", v[0]["KOLO_JOB_ID"]},
                         {"KOLO_JOB_ID", v[0]["KOLO_JOB_ID"]},
                         {"MASTER_ADDR", l.master_addr},
                         {"MASTER_PORT", port}};
      EXPECT_EQ(v[r], want) << "rank " << r << "\n" << o.out;
    }
  }
}

TEST(FakeRemoteHosts, RankZerosHostFailingToStartStartsNoOtherHost) {
  // nodea (rank 0's host) finds no program; nodeb's agent is held until nodea
  // reports MASTER_*, so its ranks never start and the job ends at once.
  const std::string rsh = R"(sh -c '[ "$1" = nodea ] && export PATH=/nonexistent; exec /bin/sh -c "$2"' fake-rsh)";
  Outcome o = run_kolorun({"-H", "nodea:1,nodeb:1", "--rsh", rsh, "--network-interface", "lo", "sh", "-c",
                           "echo started on $KOLO_RANK"});
  EXPECT_EQ(o.code, 2) << o.err;
  EXPECT_TRUE(contains(o.err, "kolorun: cannot execute 'sh': No such file or directory (on nodea) (first failure)"))
      << o.err;
  EXPECT_EQ(o.out, "");  // rank 1 on nodeb never ran
  EXPECT_LT(o.seconds, 10) << o.err;
}

TEST(FakeRemoteHosts, PartialLinesProgressBarsAndOutputDirAcrossTheAgent) {
  // One rank: the '\r'-ended segments of two ranks may interleave.
  Outcome o = run_kolorun({"-H", "localhost:1,nodea:1", "-np", "2", "--rsh", kFakeRsh, "--network-interface", "lo",
                           rank_prog(), "progress"});
  EXPECT_EQ(o.code, 0) << o.err;
  std::string mine;  // rank 1's segments, in order
  for (std::size_t i = 0; (i = o.out.find("[1] ", i)) != std::string::npos;) {
    const std::size_t end = o.out.find_first_of("\r\n", i);
    mine += o.out.substr(i, end + 1 - i);
    i = end + 1;
  }
  EXPECT_EQ(mine, "[1] step 1\r[1] step 2\r[1] done\n") << o.out;
  TempDir dir;
  o = run_kolorun({"-H", "nodea:1,nodeb:1", "--rsh", kFakeRsh, "--network-interface", "lo", "--output-dir", dir.path,
                   rank_prog(), "partial"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(read_file(dir.file("rank.1.stdout")), "partial out 1");
  EXPECT_EQ(read_file(dir.file("rank.1.stderr")), "partial err 1");
}

TEST(FakeRemoteHosts, UnreachableHostStartsNothingAndShowsTheShellsMessage) {
  TempDir dir;
  Outcome o = run_kolorun({"-H", "localhost:1,nodea:1", "--rsh", kDeadRsh, "--network-interface", "lo", rank_prog(),
                           "sleep", dir.path});
  EXPECT_EQ(o.code, 1);
  EXPECT_TRUE(contains(o.err, "kolorun: cannot reach host 'nodea': `sh -c 'echo \"ssh: connect to host $1 port 22: "
                              "No route to host\" >&2; exit 255' dead-rsh nodea true` exited with code 255: ssh: "
                              "connect to host nodea port 22: No route to host\n"))
      << o.err;
  EXPECT_TRUE(contains(o.err, "kolorun: nothing was started (1 of 1 hosts unreachable)\n")) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("rank.0.pid")));  // not even the local rank
}

TEST(FakeRemoteHosts, MissingProgramOnTheRemoteSideIsAnExecError) {
  Outcome o = run_kolorun({"-H", "nodea:2", "--rsh", kFakeRsh, "--network-interface", "lo", "nosuchprog"});
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(contains(o.err, "kolorun: cannot execute 'nosuchprog': No such file or directory (on nodea) (first "
                              "failure)"))
      << o.err;
}

TEST(FakeRemoteHosts, KilledAgentLosesTheHostAndItsRanksDie) {
  TempDir dir;
  Kolorun k({"-H", "localhost:1,nodea:2", "--rsh", kFakeRsh, "--network-interface", "lo", rank_prog(), "sleep",
             dir.path});
  auto ranks = wait_for_pids(dir.path, "rank", 3);
  ASSERT_EQ(ranks.size(), 3u);
  // The agent of nodea is rank 1's parent.
  const std::string stat = read_file("/proc/" + std::to_string(ranks[1]) + "/stat");
  const pid_t agent = std::stoi(split_lines(stat.substr(stat.rfind(')') + 4)).front());
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  Outcome o = k.wait(20);
  EXPECT_EQ(o.code, 1);
  EXPECT_TRUE(std::regex_search(o.err, std::regex("kolorun: lost host nodea \\(ranks 1, 2\\): the connection to its "
                                                  "agent closed \\(sh was killed by SIGKILL\\) \\(first failure\\); "
                                                  "stopping the other 1 rank\n")))
      << o.err;
  for (pid_t p : ranks) EXPECT_TRUE(gone_within(p, 10)) << "rank pid " << p;
  kill_leftovers(ranks);
}

TEST(FakeRemoteHosts, TimeoutStopsEveryHostsRanks) {
  TempDir dir;
  Kolorun k({"-H", "localhost:1,nodea:2", "--rsh", kFakeRsh, "--network-interface", "lo", "--timeout", "2",
             rank_prog(), "sleep", dir.path, "--grandchild"});
  auto ranks = wait_for_pids(dir.path, "rank", 3);
  auto grandchildren = wait_for_pids(dir.path, "grandchild", 3);
  Outcome o = k.wait(30);
  EXPECT_EQ(o.code, 124);
  EXPECT_TRUE(contains(o.err, "kolorun: timeout after 2 s; stopping 3 ranks\n")) << o.err;
  for (pid_t p : ranks) EXPECT_TRUE(gone_within(p, 10)) << "rank pid " << p;
  for (pid_t p : grandchildren) EXPECT_TRUE(gone_within(p, 10)) << "grandchild pid " << p;
  kill_leftovers(ranks);
  kill_leftovers(grandchildren);
}

TEST(FakeRemoteHosts, RanksOfTheFailingHostGetTheGracePeriodToo) {
  // The agent stops its host's ranks when one fails, and the launcher's stop
  // that follows must not cut the grace period short.
  TempDir dir;
  Outcome o = run_kolorun({"-H", "nodea:3", "--rsh", kFakeRsh, "--network-interface", "lo", "--grace-period", "1",
                           rank_prog(), "sleep", dir.path, "--ignore-term", "--fail-rank", "0", "--exit", "5"});
  EXPECT_EQ(o.code, 5);
  EXPECT_TRUE(contains(o.err, "kolorun: rank 0 on nodea exited with code 5 (first failure); stopping the other 2 "
                              "ranks\n")) << o.err;
  EXPECT_TRUE(contains(o.err, "kolorun: nodea: agent: ranks 1, 2 still running after the 1 s grace period; sending "
                              "SIGKILL\n")) << o.err;
  auto ranks = wait_for_pids(dir.path, "rank", 3, 1);
  for (pid_t p : ranks) EXPECT_TRUE(gone_within(p, 10)) << "rank pid " << p;
  kill_leftovers(ranks);
}

TEST(FakeRemoteHosts, AgentMissingThereIsNamedWithTheShellsMessage) {
  // The remote side answers the reachability check but has no kolorun at the
  // launcher's path.
  Outcome o = run_kolorun({"-H", "nodea:2", "--rsh", "sh -c '[ \"$2\" = true ] || exec /nonexistent/kolorun' rsh",
                           "--network-interface",
                           "lo", rank_prog(), "where"});
  EXPECT_EQ(o.code, 1);
  EXPECT_TRUE(std::regex_search(o.err, std::regex("kolorun: lost host nodea \\(ranks 0, 1\\): kolorun's agent did "
                                                  "not start there \\(`sh \\.\\.\\.`\\): sh exited with code "
                                                  "127: .*/nonexistent/kolorun.*not found \\(first failure\\)")))
      << o.err;
}

TEST(FakeRemoteHosts, ShellStartupOutputBeforeTheAgentIsRefusedAndShown) {
  Outcome o = run_kolorun({"-H", "nodea:1", "--rsh", R"(sh -c 'echo welcome to nodea; exec sh -c "$2"' rsh)",
                           "--network-interface", "lo", rank_prog(), "where"});
  EXPECT_EQ(o.code, 1);
  EXPECT_TRUE(contains(o.err, "kolorun: lost host nodea (rank 0): the remote shell printed 'welcome to nodea\n' "
                              "before kolorun's agent started (a shell startup file must not print when not "
                              "interactive) (first failure)"))
      << o.err;
}

TEST(FakeRemoteHosts, ShellStartupOutputArrivingWithTheHelloShowsOnlyTheShellsLines) {
  // The shell's line and the agent's hello (whole, or its start) in one
  // write, as one read may see them: only the shell's line is shown.
  for (const char* tail : {"KOLORUN-AGENT-1\\n", "KOLO"}) {
    const std::string rsh = std::string(R"(sh -c '[ "$2" = true ] || { printf "welcome to nodea\n)") + tail +
                            R"("; exec sleep 5; }' rsh)";
    Outcome o = run_kolorun({"-H", "nodea:1", "--rsh", rsh, "--network-interface", "lo", rank_prog(), "where"});
    EXPECT_EQ(o.code, 1);
    EXPECT_TRUE(contains(o.err, "kolorun: lost host nodea (rank 0): the remote shell printed 'welcome to nodea\n' "
                                "before kolorun's agent started"))
        << tail << ": " << o.err;
  }
}

TEST(FakeRemoteHosts, KoloRshReplacesSsh) {
  ::setenv("KOLO_RSH", kFakeRsh.c_str(), 1);
  Outcome o = run_kolorun({"-H", "nodea:2", "--network-interface", "lo", rank_prog(), "where"});
  ::unsetenv("KOLO_RSH");
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(where_lines(o.out).size(), 2u) << o.out;
}

TEST(FakeRemoteHosts, SshGetsBatchModeKeepAlivesPortAndIdentity) {
  // A program named ssh that writes down its arguments, then runs the
  // command (the last one) here.
  TempDir dir;
  const std::string ssh = dir.file("ssh");
  std::ofstream(ssh) << "#!/bin/sh\nprintf '%s\\n' \"$@\" >> " << dir.file("args") << "\n"
                     << "for last; do :; done\nexec sh -c \"$last\"\n";
  ::chmod(ssh.c_str(), 0755);
  Outcome o = run_kolorun({"-H", "nodea:1", "--rsh", ssh + " -F my_config", "-p", "2222", "-i", "/keys/id",
                           "--host-timeout", "7", "--network-interface", "lo", rank_prog(), "where"});
  EXPECT_EQ(o.code, 0) << o.err;
  const std::string ours = "-o\nBatchMode=yes\n-o\nConnectTimeout=10\n-o\nServerAliveInterval=3\n-o\n"
                           "ServerAliveCountMax=3\n-F\nmy_config\n-p\n2222\n-i\n/keys/id\nnodea\n";
  // The check (`true`), then the agent.
  EXPECT_EQ(read_file(dir.file("args")),
            ours + "true\n" + ours + "exec " + std::string(KOLORUN_PATH) + " --kolorun-agent\n");
}

TEST(HostHelp, HelpDocumentsTheHostFlags) {
  Outcome o = run_kolorun({"--help"});
  EXPECT_EQ(o.code, 0);
  for (const char* word : {"-H,--host", "--hostfile", "-p,--port", "-i,--identity", "--rsh", "KOLO_RSH", "-x VAR",
                           "--network-interface", "KOLO_IFACE", "--host-timeout", "BatchMode=yes"}) {
    EXPECT_NE(o.out.find(word), std::string::npos) << "--help does not mention " << word;
  }
}

}  // namespace
}  // namespace kolotest
