// Backend::check_peers over TCP, with threads as ranks over real sockets: a
// rank waiting on something other than its host transport (the nccl plane,
// while NCCL's kernels run) asks it whether a peer is known gone. Live peers
// are not reported, nor is one that sent ahead what this rank has not read;
// a peer whose connections closed (its process exited, or it aborted) is
// named at once.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/fingerprint.h"
#include "net/auth.h"
#include "rendezvous/store.h"
#include "transport/tcp_mesh.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;
using transport::TcpMesh;

const auth::Key& key() {
  static const auth::Key k = auth::Key::from_secret("6b1f0c2d3e4a59687f8e9dacbdcefd0e");
  return k;
}

struct Rank {
  std::unique_ptr<rdv::StoreClient> store;
  std::unique_ptr<TcpMesh> mesh;
};

// n ranks' meshes, formed on threads (each waits for the others).
std::vector<Rank> form(rdv::StoreServer& server, int n) {
  std::vector<Rank> ranks(n);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        ranks[r].store = std::make_unique<rdv::StoreClient>("127.0.0.1", server.port(), 5000ms, key(),
                                                            auth::Identity{r, n, -1});
        ranks[r].mesh = std::make_unique<TcpMesh>(*ranks[r].store, "mesh", r, n, ranks[r].store->local_address());
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return ranks;
}

// What check_peers threw within `limit` (it sees a closed connection once the
// kernel has delivered the peer's FIN), or "" if it never did.
std::string error_within(TcpMesh& mesh, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  do {
    try {
      mesh.check_peers("test wait");
    } catch (const IoError& e) {
      return e.what();
    }
    std::this_thread::sleep_for(10ms);
  } while (std::chrono::steady_clock::now() < end);
  return "";
}

TEST(PeerCheck, TcpNamesAPeerWhoseConnectionsClosedAndNoOtherRank) {
  rdv::StoreServer server("127.0.0.1", 0, key());
  auto ranks = form(server, 3);
  ASSERT_TRUE(ranks[2].mesh);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(error_within(*ranks[r].mesh, 200ms), "") << "rank " << r;

  // Rank 1 sends rank 0 its part of a collective rank 0 has not begun: bytes
  // waiting unread are a live peer, and are still there for the collective.
  const Fingerprint fp = fingerprint(Kind::Allgather, DType::I32, 1);
  std::int32_t mine = 41, got = 0;
  std::thread ahead([&] {
    std::vector<transport::SendOp> s{{0, reinterpret_cast<const char*>(&mine), 4, 4}};
    std::vector<transport::RecvOp> none;
    ranks[1].mesh->begin(fp);
    ranks[1].mesh->exchange(s, none, "test send");
  });
  ahead.join();
  EXPECT_EQ(error_within(*ranks[0].mesh, 200ms), "");
  std::vector<transport::SendOp> none;
  std::vector<transport::RecvOp> r{{1, reinterpret_cast<char*>(&got), 4}};
  ranks[0].mesh->begin(fp);
  ranks[0].mesh->exchange(none, r, "test receive");
  EXPECT_EQ(got, 41);

  // Rank 2's process ends: its sockets close with it.
  ranks[2].mesh.reset();
  for (int q : {0, 1}) {
    const std::string e = error_within(*ranks[q].mesh, 5000ms);
    EXPECT_NE(e.find("test wait: rank 2 closed its connection"), std::string::npos) << "rank " << q << ": " << e;
  }
}

TEST(PeerCheck, TcpNamesAPeerThatAborted) {
  rdv::StoreServer server("127.0.0.1", 0, key());
  auto ranks = form(server, 2);
  ASSERT_TRUE(ranks[1].mesh);
  ranks[1].mesh->abort();  // a rank that failed on its own shuts its connections down
  const std::string e = error_within(*ranks[0].mesh, 5000ms);
  EXPECT_NE(e.find("rank 1 closed its connection"), std::string::npos) << e;
}

}  // namespace
}  // namespace kolo
