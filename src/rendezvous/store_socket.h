// The few socket helpers the store's server and client share.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <string>
#include <utility>

namespace kolo::rdv {

// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept;
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset();
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// A socket listening on addr (socket() flags such as SOCK_NONBLOCK added);
// port 0 takes a free port of KOLO_PORT_RANGE when that is set (any port
// otherwise), trying them from a random start so that concurrent ranks rarely
// collide. Throws kolo::Error starting with what, naming the range when every
// port of it is taken.
Fd listen_at(sockaddr* addr, socklen_t len, int flags, const std::string& what);

// A non-blocking listening socket on host:port (port 0: the kernel picks);
// *bound_port receives the port. Throws kolo::Error.
Fd listen_tcp(const std::string& host, int port, int* bound_port);

// One connection attempt, bounded by timeout. On failure returns an invalid
// Fd and the reason in *why, so that the caller can retry.
Fd try_connect(const std::string& host, int port, std::chrono::milliseconds timeout,
               std::string* why);

// "10.1.2.3" or, with the port, "10.1.2.3:29500" ("[::1]:29500" for IPv6).
std::string address_text(const sockaddr* a, bool with_port);

// A vanished host sends no FIN: probe idle connections (TCP keep-alive) and
// bound how long sent data may stay unacknowledged (TCP_USER_TIMEOUT), both
// KOLO_PEER_TIMEOUT_MS, so that a store cut off by a link that went down
// errors out in bounded time. The store's peers always read what they are
// sent, so the user timeout cannot mistake a busy peer for a lost one.
void set_peer_timeout(int fd);

// Keep-alive probes only (KOLO_PEER_TIMEOUT_MS), for data connections: there
// a live peer may leave data unread for as long as it is late to a
// collective, and the kernel's TCP_USER_TIMEOUT also aborts a connection
// whose receive window stays closed that long although every window probe is
// answered. Data in flight is watched by transport/peer_liveness.h instead.
void set_keepalive(int fd);

// Latency matters more than throughput for the store's small messages.
void set_nodelay(int fd);

}  // namespace kolo::rdv
