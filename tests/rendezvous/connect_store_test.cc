// connect_store() with threads as ranks: each thread calls it with its own
// Discovery, as the ranks of a job would.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "core/error.h"
#include "rendezvous/discovery.h"
#include "test_util.h"

namespace kolo::rdv {
namespace {

using namespace std::chrono_literals;
using test::error_of;

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// A job id no other test or concurrent run uses.
std::string unique_job(const char* name) { return fmt::format("test-{}-{}", ::getpid(), name); }

// Runs `size` ranks as threads; each connects, publishes a key and reads
// every other rank's. Returns the servers rank 0 hosted (one at most).
int run_ranks(Discovery base) {
  std::vector<HostedStore> hosted(base.size);
  std::vector<std::unique_ptr<StoreClient>> clients(base.size);
  std::vector<std::string> errors(base.size);
  std::vector<std::thread> threads;
  for (int r = 0; r < base.size; ++r)
    threads.emplace_back([&, r] {
      try {
        Discovery d = base;
        d.rank = r;
        clients[r] = connect_store(d, hosted[r]);
        clients[r]->set("rank/" + std::to_string(r), std::to_string(r * 10));
        for (int p = 0; p < d.size; ++p)
          EXPECT_EQ(clients[r]->get("rank/" + std::to_string(p), 5000ms), std::to_string(p * 10));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < base.size; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  int servers = 0;
  for (int r = 0; r < base.size; ++r) {
    if (hosted[r]) {
      ++servers;
      EXPECT_EQ(r, 0) << "only rank 0 hosts the store";
    }
  }
  clients.clear();  // before the servers go
  return servers;
}

TEST(ConnectStore, SingleProcessHostsItsOwnStore) {
  HostedStore hosted;
  auto c = connect_store(discover({}), hosted);
  ASSERT_TRUE(hosted);
  c->set("k", "v");
  EXPECT_EQ(c->get("k", 100ms), "v");
  EXPECT_EQ(c->local_address(), "127.0.0.1");
}

TEST(ConnectStore, RankZeroHostsTheStoreAtTheGivenAddress) {
  Discovery d;
  d.source = "torchrun";
  d.size = 4;
  d.store_host = "127.0.0.1";
  d.store_port = test::free_port();
  d.rank0_hosts_store = true;
  // Not handed out: it stays for the process, for a later init() after shutdown.
  EXPECT_EQ(run_ranks(d), 0);
  ASSERT_NE(named_port_store(), nullptr);
  EXPECT_EQ(named_port_store()->port(), d.store_port);
  // A second job in the same process (shutdown, init) finds the same store.
  const StoreServer* first = named_port_store();
  EXPECT_EQ(run_ranks(d), 0);
  EXPECT_EQ(named_port_store(), first);
}

TEST(ConnectStore, LauncherHostedStoreIsOnlyConnectedTo) {
  // kolorun gives its store and every rank the job's KOLO_SECRET.
  StoreServer kolorun("127.0.0.1", 0, auth::Key::from_secret("0123456789abcdef0123456789abcdef"));
  Discovery d;
  d.secret = "0123456789abcdef0123456789abcdef";
  d.source = "kolo";
  d.size = 3;
  d.store_host = "127.0.0.1";
  d.store_port = kolorun.port();
  d.rank0_hosts_store = false;
  EXPECT_EQ(run_ranks(d), 0);
}

TEST(ConnectStore, FileRendezvousKeyedByJobIdLeavesNoFile) {
  Discovery d;
  d.source = "openmpi";
  d.size = 4;
  d.job_id = unique_job("file");
  d.rank0_hosts_store = true;
  EXPECT_EQ(run_ranks(d), 1);
  EXPECT_FALSE(file_exists("/tmp/kolo-rdv-" + d.job_id));
}

TEST(ConnectStore, FileRendezvousKeyedByParentPidLeavesNoFile) {
  Discovery d;
  d.source = "mpich";
  d.size = 3;
  d.rank0_hosts_store = true;
  EXPECT_EQ(run_ranks(d), 1);
  EXPECT_FALSE(file_exists(fmt::format("/tmp/kolo-rdv-ppid{}", ::getppid())));
}

TEST(ConnectStore, JobIdIsMadeSafeForAFileName) {
  Discovery d;
  d.size = 2;
  d.job_id = unique_job("a/b@c");
  d.rank0_hosts_store = true;
  EXPECT_EQ(run_ranks(d), 1);
}

TEST(ConnectStore, StaleFileOfAnotherStoreIsNotTrusted) {
  Discovery d;
  d.size = 2;
  d.job_id = unique_job("stale");
  d.rank0_hosts_store = true;
  const std::string path = "/tmp/kolo-rdv-" + d.job_id;
  // A live store of some other job (another key), and a file left behind
  // that points at it.
  StoreServer other("127.0.0.1", 0, test::key());
  std::ofstream(path) << "127.0.0.1:" << other.port() << " not-this-job\n";
  std::thread rank1([&] {
    std::this_thread::sleep_for(100ms);
    HostedStore none;
    Discovery r1 = d;
    r1.rank = 1;
    connect_store(r1, none)->set("from1", "x");
  });
  std::this_thread::sleep_for(300ms);  // rank 1 sees only the stale file meanwhile
  HostedStore hosted;
  auto c = connect_store(d, hosted);
  EXPECT_EQ(c->get("from1", 5000ms), "x");
  rank1.join();
  EXPECT_FALSE(StoreClient("127.0.0.1", other.port(), 1000ms, test::key()).check({"kolo/rdv/joined/1"}));
  EXPECT_FALSE(file_exists(path));
}

TEST(ConnectStore, RankWithoutRankZeroTimesOutWithAdvice) {
  test::ScopedEnv timeout("KOLO_RENDEZVOUS_TIMEOUT_MS", "300");
  Discovery d;
  d.size = 2;
  d.rank = 1;
  d.job_id = unique_job("norank0");
  d.rank0_hosts_store = true;
  HostedStore hosted;
  const std::string e = error_of([&] { connect_store(d, hosted); });
  EXPECT_NE(e.find("no store address from rank 0 in /tmp/kolo-rdv-" + d.job_id + " within 300 ms"),
            std::string::npos) << e;
  EXPECT_NE(e.find("KOLO_STORE_ADDR"), std::string::npos) << e;
}

TEST(ConnectStore, RankZeroNamesTheRanksThatNeverCameAndRemovesTheFile) {
  test::ScopedEnv timeout("KOLO_RENDEZVOUS_TIMEOUT_MS", "300");
  Discovery d;
  d.size = 3;
  d.job_id = unique_job("lonely");
  d.rank0_hosts_store = true;
  HostedStore hosted;
  const std::string e = error_of([&] { connect_store(d, hosted); });
  EXPECT_NE(e.find("rendezvous: ranks 1, 2 did not reach the store"), std::string::npos) << e;
  EXPECT_NE(e.find("KOLO_STORE_ADDR"), std::string::npos) << e;
  EXPECT_FALSE(file_exists("/tmp/kolo-rdv-" + d.job_id));
}

TEST(ConnectStore, LauncherHostedStoreWithoutAddressIsAnError) {
  Discovery d;
  d.source = "kolo";
  d.size = 2;
  d.rank0_hosts_store = false;
  HostedStore hosted;
  const std::string e = error_of([&] { connect_store(d, hosted); });
  EXPECT_NE(e.find("gave no address (KOLO_STORE_ADDR)"), std::string::npos) << e;
}

TEST(ConnectStore, TakenPortNextToTorchrunsSaysWhyKoloWantedIt) {
  // Under a real torchrun kolo's store takes MASTER_PORT+1; when something
  // else holds that port the error says where the number came from and what
  // to do, not only "address already in use".
  StoreServer holder("0.0.0.0", 0, test::key());
  Discovery d = discover({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                          {"MASTER_PORT", std::to_string(holder.port() - 1)},
                          {"TORCHELASTIC_RUN_ID", unique_job("taken")}});
  HostedStore hosted;
  const std::string e = error_of([&] { connect_store(d, hosted); });
  EXPECT_NE(e.find(fmt::format("cannot listen on 0.0.0.0:{}", holder.port())), std::string::npos) << e;
  EXPECT_NE(e.find("is MASTER_PORT+1: kolo's store under torchrun"), std::string::npos) << e;
  EXPECT_NE(e.find("init_process_group(\"kolo\") first"), std::string::npos) << e;
}

}  // namespace
}  // namespace kolo::rdv
