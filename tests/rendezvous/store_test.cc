// The store's operations, through the real client over loopback TCP.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "core/error.h"
#include "rendezvous/hosts.h"
#include "rendezvous/store.h"
#include "test_util.h"

namespace kolo::rdv {
namespace {

using namespace std::chrono_literals;
using test::error_of;
using Clock = std::chrono::steady_clock;

class StoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<StoreClient> client() {
    return std::make_unique<StoreClient>("127.0.0.1", server.port(), 5000ms, test::key());
  }
  StoreServer server{"127.0.0.1", 0, test::key()};
};

TEST_F(StoreTest, SetThenGetReturnsTheValue) {
  auto c = client();
  c->set("a", "1");
  EXPECT_EQ(c->get("a", 1000ms), "1");
  c->set("a", "two");
  EXPECT_EQ(c->get("a", 1000ms), "two");
}

TEST_F(StoreTest, ValuesAreBinaryAndMayBeLarge) {
  auto c = client();
  std::string v(3 << 20, '\0');
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<char>(i * 7);
  c->set("blob", v);
  c->set("empty", "");
  EXPECT_EQ(client()->get("blob", 1000ms), v);
  EXPECT_EQ(c->get("empty", 1000ms), "");
}

TEST_F(StoreTest, GetWaitsForASetFromAnotherClient) {
  auto reader = client();
  std::thread writer([&] {
    std::this_thread::sleep_for(150ms);
    client()->set("late", "here");
  });
  const auto t0 = Clock::now();
  EXPECT_EQ(reader->get("late", 5000ms), "here");
  EXPECT_GE(Clock::now() - t0, 100ms);
  writer.join();
}

TEST_F(StoreTest, GetTimeoutNamesTheKey) {
  const std::string e = error_of([&] { client()->get("rank/7", 100ms); });
  EXPECT_NE(e.find("rendezvous: timed out after 100 ms waiting for key: rank/7"), std::string::npos) << e;
}

TEST_F(StoreTest, WaitTimeoutNamesOnlyTheMissingKeys) {
  auto c = client();
  c->set("rank/1", "x");
  const auto t0 = Clock::now();
  const std::string e = error_of([&] { c->wait({"rank/1", "rank/3", "rank/5"}, 200ms); });
  EXPECT_GE(Clock::now() - t0, 190ms);
  EXPECT_NE(e.find("rendezvous: timed out after 200 ms waiting for keys: rank/3, rank/5"), std::string::npos) << e;
  // The connection stays usable after a timeout.
  EXPECT_EQ(c->get("rank/1", 100ms), "x");
}

TEST_F(StoreTest, WaitReturnsOnceEveryKeyExists) {
  auto c = client();
  std::thread writer([&] {
    auto w = client();
    for (int i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(30ms);
      w->set("k" + std::to_string(i), "");
    }
  });
  c->wait({"k0", "k1", "k2"}, 5000ms);
  EXPECT_TRUE(c->check({"k0", "k1", "k2"}));
  writer.join();
}

TEST_F(StoreTest, WaitWithARepeatedKey) {
  auto c = client();
  std::thread writer([&] {
    std::this_thread::sleep_for(30ms);
    client()->set("d", "");
  });
  c->wait({"d", "d"}, 5000ms);
  writer.join();
}

TEST_F(StoreTest, OneWaiterTimingOutLeavesTheOthersOnTheSameKeyWaiting) {
  auto impatient = client(), patient = client();
  std::thread t([&] { EXPECT_EQ(patient->get("x", 5000ms), "v"); });
  EXPECT_THROW(impatient->get("x", 100ms), Error);
  client()->set("x", "v");
  t.join();
  EXPECT_EQ(impatient->get("x", 0ms), "v");
}

TEST_F(StoreTest, CheckDoesNotWait) {
  auto c = client();
  EXPECT_FALSE(c->check({"x"}));
  c->set("x", "");
  EXPECT_TRUE(c->check({"x"}));
  EXPECT_FALSE(c->check({"x", "y"}));
  EXPECT_TRUE(c->check({}));
}

TEST_F(StoreTest, AddStartsAtZeroAndReturnsTheNewValue) {
  auto c = client();
  EXPECT_EQ(c->add("n", 5), 5);
  EXPECT_EQ(c->add("n", -7), -2);
  EXPECT_EQ(c->get("n", 100ms), "-2");  // counters read as decimal text
}

TEST_F(StoreTest, AddOnATextValueIsAnErrorAndTheClientGoesOn) {
  auto c = client();
  c->set("s", "abc");
  const std::string e = error_of([&] { c->add("s", 1); });
  EXPECT_NE(e.find("the value of key s is not an integer"), std::string::npos) << e;
  EXPECT_EQ(c->add("t", 1), 1);
}

TEST_F(StoreTest, AddIsAtomicAcrossEightClients) {
  constexpr int kThreads = 8, kAdds = 1000;
  std::vector<std::vector<std::int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto c = client();
      for (int i = 0; i < kAdds; ++i) seen[t].push_back(c->add("counter", 1));
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(client()->add("counter", 0), kThreads * kAdds);
  // Every intermediate value was handed out exactly once.
  std::set<std::int64_t> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  EXPECT_EQ(all.size(), std::size_t(kThreads * kAdds));
}

TEST_F(StoreTest, OneClientSharedByThreads) {
  auto c = client();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) c->add("shared", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->add("shared", 0), 800);
}

// Every client publishes a key, waits for all the others' and reads its
// neighbour's: the rendezvous pattern of a job, at 256 ranks.
TEST_F(StoreTest, ManyConcurrentClientsExchangeKeys) {
  constexpr int kClients = 256;
  std::vector<std::string> keys;
  for (int i = 0; i < kClients; ++i) keys.push_back("addr/" + std::to_string(i));
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      auto c = client();
      c->set(keys[i], "host" + std::to_string(i));
      c->wait(keys, 10000ms);
      if (c->get(keys[(i + 1) % kClients], 1000ms) == "host" + std::to_string((i + 1) % kClients)) ++ok;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, kClients);
}

TEST_F(StoreTest, LocalAddressIsTheIpOfTheClientSocket) {
  EXPECT_EQ(client()->local_address(), "127.0.0.1");
}

TEST(StoreConnect, ClientWaitsForAServerThatStartsLater) {
  const int port = test::free_port();
  std::unique_ptr<StoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(200ms);
    server = std::make_unique<StoreServer>("127.0.0.1", port, test::key());
  });
  StoreClient c("127.0.0.1", port, 5000ms, test::key());
  starter.join();
  c.set("k", "v");
  EXPECT_EQ(c.get("k", 100ms), "v");
}

TEST(StoreConnect, ConnectTimeoutNamesTheAddress) {
  const int port = test::free_port();
  const auto t0 = Clock::now();
  const std::string e = error_of([&] { StoreClient("127.0.0.1", port, 200ms, test::key()); });
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_NE(e.find(fmt::format("could not connect to the rendezvous store at 127.0.0.1:{} within 200 ms", port)),
            std::string::npos)
      << e;
}

TEST(StoreConnect, ServerOnAPortInUseIsAnError) {
  StoreServer first("127.0.0.1", 0, test::key());
  const std::string e = error_of([&] { StoreServer("127.0.0.1", first.port(), test::key()); });
  EXPECT_NE(e.find(fmt::format("cannot listen on 127.0.0.1:{}", first.port())), std::string::npos) << e;
}

TEST(StoreShutdown, RequestAfterTheServerIsGoneIsALostConnection) {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0, test::key());
  const int port = server->port();
  StoreClient c("127.0.0.1", port, 1000ms, test::key());
  c.set("k", "v");
  server.reset();
  const std::string e = error_of([&] { c.set("k", "w"); });
  EXPECT_NE(e.find(fmt::format("lost connection to the rendezvous store at 127.0.0.1:{}", port)), std::string::npos)
      << e;
  // And stays lost, with the same message.
  EXPECT_THROW(c.get("k", 100ms), IoError);
}

TEST(StoreShutdown, PendingGetFailsAtOnceWhenTheServerStops) {
  StoreServer server("127.0.0.1", 0, test::key());
  StoreClient c("127.0.0.1", server.port(), 1000ms, test::key());
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    server.stop();
  });
  const auto t0 = Clock::now();
  EXPECT_THROW(c.get("never", 20000ms), IoError);
  EXPECT_LT(Clock::now() - t0, 5s);
  stopper.join();
  server.stop();  // a second stop is harmless
}

// The GPU data plane's farewell (transport/gpu.h): a wait a destructor makes.
TEST_F(StoreTest, BarrierUnlessIsTrueWhenEveryRankCame) {
  std::vector<std::thread> ranks;
  std::atomic<int> came{0};
  for (int r = 0; r < 3; ++r)
    ranks.emplace_back([&, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50 * r));
      if (store_barrier_unless(*client(), "bye", "err", r, 3, 5000ms)) ++came;
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(came, 3);
}

TEST_F(StoreTest, BarrierUnlessGivesUpOnARankThatNeverComes) {
  const auto t0 = Clock::now();
  EXPECT_FALSE(store_barrier_unless(*client(), "bye", "err", 0, 2, 300ms));
  EXPECT_GE(Clock::now() - t0, 300ms);
}

TEST_F(StoreTest, BarrierUnlessStopsAtOnceWhenARankPostedAFailure) {
  client()->set("err/1", "rank 1 failed");
  const auto t0 = Clock::now();
  EXPECT_FALSE(store_barrier_unless(*client(), "bye", "err", 0, 2, 60000ms));
  EXPECT_LT(Clock::now() - t0, 30000ms);
}

TEST_F(StoreTest, BarrierUnlessIsFalseNotAnErrorWhenTheStoreIsGone) {
  auto c = client();
  server.stop();
  EXPECT_FALSE(store_barrier_unless(*c, "bye", "err", 0, 2, 5000ms));
}

}  // namespace
}  // namespace kolo::rdv
