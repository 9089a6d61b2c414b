// Data connections against intruders, with threads as ranks over real
// sockets: while the mesh waits for its last rank, connections to the ranks'
// listeners that send garbage, a wrong MAC, a bogus identity or nothing are
// rejected and logged, and the mesh still forms and carries data. A rank with
// another key is refused by its peers with a clear error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/fingerprint.h"
#include "rendezvous/store.h"
#include "transport/tcp_mesh.h"
#include "util.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;
using rdv::StoreClient;
using rdv::StoreServer;
using sectest::job_key;
using sectest::other_key;
using sectest::Raw;
using transport::TcpMesh;

int port_of(const std::string& addr) { return std::stoi(addr.substr(addr.rfind(':') + 1)); }

struct Rank {
  std::unique_ptr<StoreClient> store;
  std::unique_ptr<TcpMesh> mesh;
  std::string error;
};

// Starts rank r of n on a thread: store client with `key`, then the mesh.
std::thread start_rank(Rank& me, int store_port, const auth::Key& key, int r, int n) {
  return std::thread([&me, store_port, key, r, n] {
    try {
      me.store = std::make_unique<StoreClient>("127.0.0.1", store_port, 5000ms, key, auth::Identity{r, n, -1});
      me.mesh = std::make_unique<TcpMesh>(*me.store, "mesh", r, n, me.store->local_address());
    } catch (const std::exception& e) {
      me.error = e.what();
    }
  });
}

// Every rank sends its rank number to every other and checks what it gets.
void exchange_all(std::vector<Rank>& ranks) {
  const int n = static_cast<int>(ranks.size());
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        std::vector<std::int32_t> out(n, r), in(n, -1);
        std::vector<transport::SendOp> sends;
        std::vector<transport::RecvOp> recvs;
        for (int p = 0; p < n; ++p) {
          if (p == r) continue;
          sends.push_back({p, reinterpret_cast<const char*>(&out[p]), 4, 4});
          recvs.push_back({p, reinterpret_cast<char*>(&in[p]), 4});
        }
        ranks[r].mesh->begin(fingerprint(Kind::Alltoall, DType::I32, 1));
        ranks[r].mesh->exchange(sends, recvs, "test exchange");
        for (int p = 0; p < n; ++p)
          if (p != r && in[p] != p) errors[r] += fmt::format("got {} from rank {}; ", in[p], p);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(MeshAuth, IntrudersAreRejectedWhileTheMeshWaitsForItsRanks) {
  ::testing::internal::CaptureStderr();
  constexpr int n = 3;
  StoreServer server("127.0.0.1", 0, job_key());
  std::vector<Rank> ranks(n);
  std::thread t0 = start_rank(ranks[0], server.port(), job_key(), 0, n);
  std::thread t1 = start_rank(ranks[1], server.port(), job_key(), 1, n);
  // The test's own view of the store, to find the listeners.
  StoreClient view("127.0.0.1", server.port(), 5000ms, job_key());
  std::vector<std::unique_ptr<Raw>> silent;
  for (int r : {0, 1}) {
    const int port = port_of(view.get(fmt::format("mesh/addr/{}", r), 10000ms));
    {
      Raw garbage(port);
      EXPECT_EQ(garbage.read(auth::kChallengeBytes).size(), auth::kChallengeBytes);
      garbage.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
      EXPECT_TRUE(garbage.closed_by_peer()) << "rank " << r;
    }
    {
      Raw wrong(port);
      const auth::Outcome o = wrong.handshake(other_key(), auth::Channel::Data, {2, n, r});
      EXPECT_EQ(o.status, auth::Outcome::Rejected) << "rank " << r << ": " << o.detail;
    }
    {
      // The right key, claiming a rank this job does not have.
      Raw bogus(port);
      const auth::Outcome o = bogus.handshake(job_key(), auth::Channel::Data, {7, n, r});
      EXPECT_EQ(o.status, auth::Outcome::Rejected) << "rank " << r << ": " << o.detail;
    }
    {
      Raw prefix(port);
      prefix.send(sectest::length_prefix(std::uint64_t(1) << 40));
      EXPECT_TRUE(prefix.closed_by_peer()) << "rank " << r;
    }
    silent.push_back(std::make_unique<Raw>(port));  // connects and never speaks
  }
  // Only now does the last rank come: no intruder took its slot.
  std::thread t2 = start_rank(ranks[2], server.port(), job_key(), 2, n);
  t0.join();
  t1.join();
  t2.join();
  for (int r = 0; r < n; ++r) ASSERT_EQ(ranks[r].error, "") << "rank " << r;
  exchange_all(ranks);
  ranks.clear();
  const std::string text = ::testing::internal::GetCapturedStderr();
  // 4 rejections on each of ranks 0 and 1, and each one's silent connection
  // closed when the mesh was complete.
  EXPECT_EQ(sectest::count(text, "warning: rejected a data connection from 127.0.0.1:"), 8u) << text;
  EXPECT_EQ(sectest::count(text, ": not a kolo handshake"), 4u) << text;
  EXPECT_EQ(sectest::count(text, ": wrong credentials (not this job's secret)"), 2u) << text;
  EXPECT_EQ(sectest::count(text, ": this job's credentials, but rank 7 of 3"), 2u) << text;
  EXPECT_EQ(sectest::count(text, "that never authenticated"), 2u) << text;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
TEST(MeshAuth, ARankWithAnotherKeyIsRefusedByItsPeers) {
  ::testing::internal::CaptureStderr();
  ::setenv("KOLO_RENDEZVOUS_TIMEOUT_MS", "3000", 1);
  // An open store lets both keys in, so that the data connections are what
  // tells them apart.
  StoreServer open("127.0.0.1", 0);
  std::vector<Rank> ranks(2);
  std::thread t0 = start_rank(ranks[0], open.port(), job_key(), 0, 2);
  std::thread t1 = start_rank(ranks[1], open.port(), other_key(), 1, 2);
  t0.join();
  t1.join();
  ::unsetenv("KOLO_RENDEZVOUS_TIMEOUT_MS");
  const std::string text = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(ranks[1].error.find("rank 0 at 127.0.0.1:"), std::string::npos) << ranks[1].error;
  EXPECT_NE(ranks[1].error.find("rejected this rank's credentials (different job or KOLO_SECRET?)"),
            std::string::npos) << ranks[1].error;
  EXPECT_NE(ranks[0].error.find("timed out waiting for rank(s) 1 to connect"), std::string::npos) << ranks[0].error;
  EXPECT_NE(text.find("rejected a data connection from 127.0.0.1:"), std::string::npos) << text;
  EXPECT_NE(text.find("wrong credentials (not this job's secret)"), std::string::npos) << text;
}
#pragma GCC diagnostic pop

}  // namespace
}  // namespace kolo
