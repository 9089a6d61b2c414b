// A store a rank hosts for its peers (rendezvous/hosted_store.h): retired
// when its owner lets go, it serves the peers on and stops by itself once
// only the host rank's own connections are left.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/error.h"
#include "rendezvous/hosted_store.h"
#include "test_util.h"

namespace kolo::rdv {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::unique_ptr<StoreClient> client_as(const StoreServer& s, int rank) {
  return std::make_unique<StoreClient>("127.0.0.1", s.port(), 2000ms, test::key(), auth::Identity{rank, 2, -1});
}

// Who the retired store says holds it, once that reads `want` (the server
// sees closes on its own thread); what it says last after 10 s otherwise.
std::string holders_once(StoreServer& s, const std::string& want) {
  std::string holders;
  const auto until = Clock::now() + 10s;
  while (Clock::now() < until) {
    EXPECT_FALSE(s.wait_retired(Clock::now() + 20ms, &holders));
    if (holders == want) break;
  }
  return holders;
}

TEST(HostedStore, RetiredStoreServesPeersUntilTheyCloseThenStops) {
  StoreServer s("127.0.0.1", 0, test::key());
  auto host = client_as(s, 0);  // the host rank's own connection does not hold the store
  auto peer = client_as(s, 1);
  host->set("ready/0", "1");
  s.retire(0);
  EXPECT_EQ(holders_once(s, "rank 1"), "rank 1");
  // The peer still inside its rendezvous: its last requests are answered.
  peer->set("ready/1", "1");
  peer->wait({"ready/0", "ready/1"}, 1000ms);
  EXPECT_EQ(peer->get("ready/0", 1000ms), "1");
  peer.reset();
  EXPECT_TRUE(s.wait_retired(Clock::now() + 10s, nullptr));
  // Stopped: what is left of the host's own connections is closed.
  EXPECT_THROW(host->check({"ready/0"}), kolo::Error);
}

TEST(HostedStore, RetiredStoreNamesEveryRankStillConnected) {
  StoreServer s("127.0.0.1", 0, test::key());
  auto a = client_as(s, 3);
  auto b = client_as(s, 1);
  auto b2 = client_as(s, 1);  // a rank's second connection (a subgroup): named once
  s.retire(0);
  EXPECT_EQ(holders_once(s, "ranks 1, 3"), "ranks 1, 3");
  a.reset();
  b.reset();
  EXPECT_EQ(holders_once(s, "rank 1"), "rank 1");
  b2.reset();
  EXPECT_TRUE(s.wait_retired(Clock::now() + 10s, nullptr));
}

TEST(HostedStore, RetiredWithoutPeersStopsAtOnce) {
  StoreServer s("127.0.0.1", 0, test::key());
  s.retire(0);
  EXPECT_TRUE(s.wait_retired(Clock::now() + 10s, nullptr));
}

TEST(HostedStore, NotRetiredStoreIsNotWaitedFor) {
  StoreServer s("127.0.0.1", 0, test::key());
  std::string holders;
  EXPECT_FALSE(s.wait_retired(Clock::now() + 50ms, &holders));
  EXPECT_EQ(holders, "");
}

// The owner lets go of a HostedStore: the store is retired, not stopped, and
// the peer that was between two requests finishes its rendezvous.
TEST(HostedStore, DroppedByItsOwnerItStaysUpForThePeer) {
  HostedStore h = host_store(0, "127.0.0.1", 0, test::key());
  auto peer = client_as(*h, 1);
  peer->set("ready/1", "1");
  h.reset();
  peer->set("after", "1");
  EXPECT_EQ(peer->get("after", 1000ms), "1");
}

#if defined(__SANITIZE_ADDRESS__)
#define KOLO_TEST_LEAK_CHECKED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KOLO_TEST_LEAK_CHECKED 1
#endif
#endif
#ifndef KOLO_TEST_LEAK_CHECKED
#define KOLO_TEST_LEAK_CHECKED 0
#endif

// A forked child (a data loader's worker) inherits the store but not its
// thread: letting go of its copy, and its exit, must leave the parent's
// store serving.
TEST(HostedStore, AForkedChildLeavesTheParentsStoreAlone) {
  HostedStore h = host_store(0, "127.0.0.1", 0, test::key());
  auto peer = client_as(*h, 1);
  std::fflush(nullptr);  // or the child prints gtest's buffered output again
  const pid_t pid = ::fork();
  if (pid == 0) {
    h.reset();
#if KOLO_TEST_LEAK_CHECKED
    // LeakSanitizer, at a forked child's exit, finds the blocks of the
    // parent's store thread (which the child has not got, so neither its
    // stack) unreachable and fails the child: skip the exit handlers there.
    ::_exit(0);
#else
    std::exit(0);  // the wait at exit too
#endif
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  peer->set("k", "v");
  EXPECT_EQ(peer->get("k", 1000ms), "v");
}

TEST(HostedStore, ClientNamesTheRankThatHostsALostStore) {
  auto s = std::make_unique<StoreServer>("127.0.0.1", 0, test::key());
  auto peer = client_as(*s, 1);
  peer->set_host("rank 0");
  s.reset();  // stopped, as when its host crashed
  const std::string e = test::error_of([&] { peer->set("k", "v"); });
  EXPECT_NE(e.find("lost connection to the rendezvous store at 127.0.0.1:"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 0 hosts it: did rank 0 crash or get killed?"), std::string::npos) << e;
}

}  // namespace
}  // namespace kolo::rdv
