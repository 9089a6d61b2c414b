// Full mesh of TCP connections between the ranks of a communicator, and the
// progress loop that moves bytes over several of them at once.
//
// Data connections carry raw bytes with no per-message framing: all ranks
// issue the same collectives in the same order, so each side knows how many
// bytes to expect (as in Gloo and NCCL).
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/fingerprint.h"
#include "net/auth.h"
#include "net/socket.h"
#include "rendezvous/store.h"
#include "transport/members.h"
#include "transport/peer_liveness.h"

namespace kolo::transport {

using net::Clock;

struct SendOp {
  int peer;
  const char* data;
  std::size_t len;
  std::size_t avail;  // bytes of data ready to go (<= len); the rest is released later
  std::size_t done = 0;
};

struct RecvOp {
  int peer;
  char* data;
  std::size_t len;
  std::size_t done = 0;
};

class TcpMesh {
 public:
  // Listens (on a port of KOLO_PORT_RANGE), publishes `address` (this
  // rank's advertised IP, net/nic.h) and the port under `prefix` in the
  // store, connects to every other member and authenticates each connection
  // with the job's key (the store client's), both ways. Connections that fail
  // to are rejected and logged while the mesh waits for the real ranks.
  // `rank` and `size` are within the mesh; `members` maps them to the job's
  // ranks and hosts for messages (a sub-group's mesh has its own prefix).
  TcpMesh(rdv::StoreClient& store, const std::string& prefix, int rank, int size,
          const std::string& address, Members members = {});

  // Starts a collective: the first bytes this rank sends to each peer in it
  // are preceded by fp, and the first bytes from each peer must be preceded
  // by an equal fingerprint, or the collective fails with both calls named.
  void begin(const Fingerprint& fp);

  // Shuts every connection down: peers blocked on us see end-of-stream at once.
  void abort();
  // Fails naming a peer whose connection has closed or broken (its process
  // exited, or it aborted), without reading: bytes a peer sent ahead stay.
  void check_peers(const char* what);

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Called while a transfer waits (at least every 20 ms); it throws to fail
  // the transfer. A host's ranks are blocked on their own connections while
  // a local peer may fail on its own: the hierarchical backend checks the
  // host's shared-memory group here, so the failure spreads at once.
  void set_watch(std::function<void(const char* what)> watch) { watch_ = std::move(watch); }

  // Progresses all sends and receives until every one is complete.
  // on_progress(recvs) is called whenever a receive made progress; it may
  // raise SendOp::avail (e.g. to forward what just arrived). Fails with an
  // error naming the peer and `what` when a peer disconnects or nothing
  // moves for the timeout.
  template <class OnProgress>
  void exchange(std::span<SendOp> sends, std::span<RecvOp> recvs, const char* what,
                OnProgress&& on_progress);
  void exchange(std::span<SendOp> sends, std::span<RecvOp> recvs, const char* what) {
    exchange(sends, recvs, what, [](std::span<RecvOp>) {});
  }

 private:
  // Accepts the connections of the ranks above this one, authenticating each.
  // `me`: the advertised address, for the error when peers never come.
  void accept_peers(const auth::Key& key, Clock::time_point deadline, const std::string& me);

  // One pass of non-blocking I/O; returns whether any receive progressed and
  // sets `moved` if any byte moved at all.
  bool try_io(std::span<SendOp> sends, std::span<RecvOp> recvs, bool& moved, const char* what);
  void warn_stall(std::span<SendOp> sends, std::span<RecvOp> recvs, const char* what);
  // Fails naming the peer whose host stopped answering (peer_liveness.h).
  void check_alive(std::span<SendOp> sends, std::span<RecvOp> recvs, const char* what);
  void wait_io(std::span<SendOp> sends, std::span<RecvOp> recvs, Clock::time_point deadline,
               const char* what);

  // Moves header and data bytes in one system call; returns bytes of data moved
  // (0 when the socket would block) and advances the header counter.
  std::size_t send_some(int peer, const char* data, std::size_t len);
  std::size_t recv_some(int peer, char* data, std::size_t len, const char* what);
  // A read from `peer` that returned n (0: end of stream, < 0: errno) fails.
  [[noreturn]] void fail_read(int peer, ssize_t n, const char* what) const;

  static constexpr std::size_t kHeader = sizeof(Fingerprint);
  int rank_;
  int size_;
  Members members_;
  Fingerprint current_, previous_;
  std::vector<std::size_t> hdr_sent_, hdr_recvd_;  // header bytes moved, per peer
  std::vector<Fingerprint> hdr_in_;
  net::Listener listener_;
  std::vector<net::Fd> peers_;  // peers_[rank_] is empty
  std::vector<pollfd> pollfds_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds stall_warn_;
  std::function<void(const char*)> watch_;
  PeerLiveness liveness_;
};

template <class OnProgress>
void TcpMesh::exchange(std::span<SendOp> sends, std::span<RecvOp> recvs, const char* what,
                       OnProgress&& on_progress) {
  auto deadline = Clock::now() + timeout_;
  auto warn_at = Clock::now() + stall_warn_;
  for (;;) {
    bool moved = false;
    if (try_io(sends, recvs, moved, what)) on_progress(recvs);
    bool all_done = true;
    for (auto& s : sends) all_done &= s.done == s.len && hdr_sent_[s.peer] == kHeader;
    for (auto& r : recvs) all_done &= r.done == r.len && hdr_recvd_[r.peer] == kHeader;
    if (all_done) return;
    if (moved) {
      deadline = Clock::now() + timeout_;
      warn_at = Clock::now() + stall_warn_;
      continue;
    }
    if (Clock::now() >= warn_at) {
      warn_stall(sends, recvs, what);
      warn_at = Clock::now() + stall_warn_;
    }
    check_alive(sends, recvs, what);
    wait_io(sends, recvs, deadline, what);
  }
}

}  // namespace kolo::transport
