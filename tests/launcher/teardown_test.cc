// Supervision: a failing rank, a signal to kolorun, a timeout or kolorun's
// own death ends the whole job, every rank and what the ranks started.
// Deadlines are generous (the machine is slow and shared); "promptly" means
// well inside them, never a measured speed.
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "launcher_test_util.h"

namespace kolotest {
namespace {

class Teardown : public testing::Test {
 protected:
  void TearDown() override { kill_leftovers(watched_); }

  // Remembers pids so that a failed test does not leave sleepers behind.
  std::vector<pid_t> watch(std::vector<pid_t> pids) {
    watched_.insert(watched_.end(), pids.begin(), pids.end());
    return pids;
  }

  void expect_all_gone(const std::vector<pid_t>& pids, const char* what) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      EXPECT_TRUE(gone_within(pids[i], 10)) << what << " " << i << " (pid " << pids[i] << ") still exists";
    }
  }

  TempDir dir_;
  std::vector<pid_t> watched_;
};

TEST_F(Teardown, AllRanksExitingZeroExitsZero) {
  Outcome o = run_kolorun({"-np", "3", rank_prog(), "exit", "0", "0"});
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.err, "");
}

TEST_F(Teardown, FailingRanksExitCodeIsKolorunsAndNamed) {
  Outcome o = run_kolorun({"-np", "3", rank_prog(), "exit", "7", "2"});
  EXPECT_EQ(o.code, 7);
  EXPECT_TRUE(contains(o.err, "kolorun: rank 2 exited with code 7 (first failure)")) << o.err;
}

TEST_F(Teardown, FailingRankStopsTheSleepingRanks) {
  Kolorun k({"-np", "4", rank_prog(), "sleep", dir_.path, "--fail-rank", "1", "--exit", "3"});
  auto ranks = watch(wait_for_pids(dir_.path, "rank", 4));
  Outcome o = k.wait(20);
  EXPECT_EQ(o.code, 3);
  EXPECT_TRUE(contains(o.err, "kolorun: rank 1 exited with code 3 (first failure); stopping the other 3 ranks\n"))
      << o.err;
  EXPECT_TRUE(contains(o.err, "[1] rank 1 failing now\n")) << o.err;  // its last words are relayed
  expect_all_gone(ranks, "rank");
}

TEST_F(Teardown, RankKilledBySignalStopsTheOthersAndTheirChildren) {
  Kolorun k({"-np", "3", rank_prog(), "sleep", dir_.path, "--grandchild", "--fail-rank", "2", "--signal", "9"});
  auto ranks = watch(wait_for_pids(dir_.path, "rank", 3));
  auto grandchildren = watch(wait_for_pids(dir_.path, "grandchild", 3));
  Outcome o = k.wait(20);
  EXPECT_EQ(o.code, 128 + 9);
  EXPECT_TRUE(contains(o.err, "kolorun: rank 2 was killed by signal 9 (SIGKILL) (first failure); "
                              "stopping the other 2 ranks\n"))
      << o.err;
  expect_all_gone(ranks, "rank");
  expect_all_gone(grandchildren, "grandchild of rank");
}

TEST_F(Teardown, RankIgnoringSigtermIsKilledAfterTheGracePeriod) {
  Kolorun k({"-np", "3", "--grace-period", "1", rank_prog(), "sleep", dir_.path, "--ignore-term",
             "--grandchild", "--fail-rank", "0", "--exit", "5"});
  auto ranks = watch(wait_for_pids(dir_.path, "rank", 3));
  auto grandchildren = watch(wait_for_pids(dir_.path, "grandchild", 3));
  Outcome o = k.wait(20);
  EXPECT_EQ(o.code, 5);
  EXPECT_TRUE(contains(o.err, "kolorun: ranks 1, 2 still running after the 1 s grace period; sending SIGKILL\n"))
      << o.err;
  expect_all_gone(ranks, "rank");
  expect_all_gone(grandchildren, "grandchild of rank");
}

TEST_F(Teardown, SigintStopsAllRanksAndExits130) {
  Kolorun k({"-np", "4", rank_prog(), "sleep", dir_.path, "--grandchild"});
  auto ranks = watch(wait_for_pids(dir_.path, "rank", 4));
  auto grandchildren = watch(wait_for_pids(dir_.path, "grandchild", 4));
  ASSERT_EQ(::kill(k.pid(), SIGINT), 0);
  Outcome o = k.wait(20);
  EXPECT_EQ(o.code, 130);
  EXPECT_TRUE(contains(o.err, "kolorun: interrupted (SIGINT); stopping 4 ranks\n")) << o.err;
  expect_all_gone(ranks, "rank");
  expect_all_gone(grandchildren, "grandchild of rank");
}

TEST_F(Teardown, SigtermStopsAllRanksAndExits143) {
  Kolorun k({"-np", "2", rank_prog(), "sleep", dir_.path});
  auto ranks = watch(wait_for_pids(dir_.path, "rank", 2));
  ASSERT_EQ(::kill(k.pid(), SIGTERM), 0);
  Outcome o = k.wait(20);
  EXPECT_EQ(o.code, 143);
  EXPECT_TRUE(contains(o.err, "kolorun: interrupted (SIGTERM); stopping 2 ranks\n")) << o.err;
  expect_all_gone(ranks, "rank");
}

TEST_F(Teardown, SecondSignalSkipsTheGracePeriod) {
  // The ranks ignore SIGTERM and the grace period is long: only the second
  // SIGTERM to kolorun ends the job in time. Signals sent close together may
  // merge into one, so kolorun is signalled until its ranks are gone.
  Kolorun k({"-np", "2", "--grace-period", "60", rank_prog(), "sleep", dir_.path, "--ignore-term"});
  auto ranks = watch(wait_for_pids(dir_.path, "rank", 2));
  const double until = now_seconds() + 30;
  while (now_seconds() < until && ::kill(ranks[0], 0) == 0) {
    ::kill(k.pid(), SIGTERM);
    ::usleep(100 * 1000);
  }
  Outcome o = k.wait(30);
  EXPECT_EQ(o.code, 143);
  EXPECT_TRUE(contains(o.err, "kolorun: interrupted (SIGTERM); stopping 2 ranks\n")) << o.err;
  EXPECT_TRUE(contains(o.err, "kolorun: ranks 0, 1 still running and kolorun got SIGTERM again; sending SIGKILL\n"))
      << o.err;
  EXPECT_LT(o.seconds, 50);  // not the 60 s grace period
  expect_all_gone(ranks, "rank");
}

TEST_F(Teardown, TimeoutStopsTheJobAndExits124) {
  Kolorun k({"-np", "2", "--timeout", "1", rank_prog(), "sleep", dir_.path});
  auto ranks = watch(wait_for_pids(dir_.path, "rank", 2));
  Outcome o = k.wait(20);
  EXPECT_EQ(o.code, 124);
  EXPECT_TRUE(contains(o.err, "kolorun: timeout after 1 s; stopping 2 ranks\n")) << o.err;
  EXPECT_GE(o.seconds, 0.9);
  expect_all_gone(ranks, "rank");
}

TEST_F(Teardown, RanksDieWithAKolorunKilledByKill9) {
  Kolorun k({"-np", "3", rank_prog(), "sleep", dir_.path});
  auto ranks = watch(wait_for_pids(dir_.path, "rank", 3));
  ASSERT_EQ(::kill(k.pid(), SIGKILL), 0);
  Outcome o = k.wait(20);
  EXPECT_EQ(o.code, 128 + 9);
  expect_all_gone(ranks, "rank");  // PR_SET_PDEATHSIG: nobody was left to stop them
}

}  // namespace
}  // namespace kolotest
