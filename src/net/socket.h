// TCP sockets as kolo opens them: listening in KOLO_PORT_RANGE, connecting
// within a deadline, the options every connection wants, and the blocking
// reads and writes of handshakes. The store (rendezvous/), the data
// connections (transport/) and kolorun all open theirs here, so a setting
// such as KOLO_PORT_RANGE or KOLO_PEER_TIMEOUT_MS holds for every socket.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "net/fd.h"

namespace kolo::net {

using Clock = std::chrono::steady_clock;

struct Listener {
  Fd fd;
  int port = 0;
};

// A socket listening on addr (socket() flags such as SOCK_NONBLOCK added);
// port 0 takes a free port of KOLO_PORT_RANGE when that is set (any port
// otherwise), trying them from a random start so that concurrent ranks rarely
// collide. Throws kolo::Error starting with what, naming the range when every
// port of it is taken.
Fd listen_at(sockaddr* addr, socklen_t len, int flags, const std::string& what);

// Listens on host:port (port 0: as listen_at chooses). Errors read
// "<what>: cannot listen on host:port: <why>".
Listener listen_tcp(const std::string& host, int port, int flags, const std::string& what);

// Accepts one connection, failing after the deadline with `what` in the message.
Fd accept_until(const Listener& l, Clock::time_point deadline, const std::string& what);

// One connection attempt, bounded by timeout (a SYN to a host that is down
// could otherwise block for minutes). The socket returned is blocking, with
// TCP_NODELAY. On failure returns an invalid Fd and the reason in *why, so
// that the caller can retry.
Fd try_connect(const std::string& host, int port, std::chrono::milliseconds timeout, std::string* why);

// Connects to host:port, retrying until the deadline; the error names `what`.
Fd connect_until(const std::string& host, int port, Clock::time_point deadline, const std::string& what);

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

// Low latency, large buffers, keep-alive: what every data connection wants.
void tune_data_socket(int fd, int buffer_bytes);
void set_nonblocking(int fd, bool on);

// Blocking helpers for handshakes (not the data path). Errors are
// kolo::IoError naming `what`.
void write_all(int fd, const void* buf, std::size_t len, const std::string& what);
void read_all(int fd, void* buf, std::size_t len, Clock::time_point deadline, const std::string& what);

}  // namespace kolo::net
