#include "net/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>

#include "core/config.h"
#include "core/error.h"

namespace kolo::net {

namespace {

using AddrList = std::unique_ptr<addrinfo, decltype(&freeaddrinfo)>;

// Resolves host:port; on failure returns null and the resolver's reason.
AddrList resolve(const std::string& host, int port, bool passive, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    *why = fmt::format("cannot resolve {}: {}", host, gai_strerror(rc));
    return AddrList(nullptr, freeaddrinfo);
  }
  return AddrList(res, freeaddrinfo);
}

void set_port(sockaddr* a, int port) {
  if (a->sa_family == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(a)->sin6_port = htons(static_cast<std::uint16_t>(port));
  else
    reinterpret_cast<sockaddr_in*>(a)->sin_port = htons(static_cast<std::uint16_t>(port));
}

int port_of(const sockaddr* a) {
  return a->sa_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6*>(a)->sin6_port)
                                  : ntohs(reinterpret_cast<const sockaddr_in*>(a)->sin_port);
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000 * 1000));
}

// One socket bound to addr and listening. SO_REUSEADDR lets a store restarted
// on a fixed port (MASTER_PORT) bind without waiting for the previous run's
// connections to leave TIME_WAIT; it also lets two sockets bind one port as
// long as neither listens yet, so a port is ours only once listen() succeeds.
// Returns an invalid Fd with errno set when bind() or listen() fails.
Fd try_listen(const sockaddr* addr, socklen_t len, int flags) {
  Fd fd(::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | flags, 0));
  if (!fd.valid()) fail("socket(): {}", errno_text(errno));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), addr, len) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
    const int saved = errno;
    fd.reset();
    errno = saved;
  }
  return fd;
}

}  // namespace

Fd listen_at(sockaddr* addr, socklen_t len, int flags, const std::string& what) {
  static const config::PortRange range = config::port_range();
  if (port_of(addr) != 0 || range.lo == 0) {
    Fd fd = try_listen(addr, len, flags);
    if (!fd.valid()) fail("{}: {}", what, errno_text(errno));
    return fd;
  }
  const int n = range.hi - range.lo + 1;
  std::random_device rd;
  const int start = static_cast<int>(rd() % static_cast<unsigned>(n));
  for (int i = 0; i < n; ++i) {
    set_port(addr, range.lo + (start + i) % n);
    Fd fd = try_listen(addr, len, flags);
    if (fd.valid()) return fd;
    if (errno != EADDRINUSE && errno != EACCES) fail("{}: {}", what, errno_text(errno));
  }
  set_port(addr, 0);
  fail("{}: every port of KOLO_PORT_RANGE={}-{} is in use on this host", what, range.lo, range.hi);
}

Listener listen_tcp(const std::string& host, int port, int flags, const std::string& what) {
  const std::string where = fmt::format("{}: cannot listen on {}:{}", what, host, port);
  std::string why;
  AddrList addrs = resolve(host, port, /*passive=*/true, &why);
  if (!addrs) fail("{}: {}", where, why);
  const addrinfo* a = addrs.get();
  Listener l{listen_at(a->ai_addr, a->ai_addrlen, flags, where), 0};
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(l.fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  l.port = port_of(reinterpret_cast<const sockaddr*>(&ss));
  return l;
}

Fd accept_until(const Listener& l, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    pollfd p{l.fd.get(), POLLIN, 0};
    int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) fail("timed out waiting for {}", what);
    int fd = ::accept4(l.fd.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return Fd(fd);
    if (errno != EINTR && errno != ECONNABORTED) fail("accept(): {}", errno_text(errno));
  }
}

Fd try_connect(const std::string& host, int port, std::chrono::milliseconds timeout, std::string* why) {
  AddrList addrs = resolve(host, port, /*passive=*/false, why);
  if (!addrs) return Fd();
  for (const addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      *why = fmt::format("socket(): {}", errno_text(errno));
      continue;
    }
    int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int n;
      do n = ::poll(&p, 1, static_cast<int>(timeout.count()));
      while (n < 0 && errno == EINTR);
      if (n == 0) {
        err = ETIMEDOUT;
      } else {
        socklen_t len = sizeof err;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      }
    }
    if (err != 0) {
      *why = errno_text(err);
      continue;
    }
    // The callers do blocking I/O with their own deadlines (poll before recv).
    set_nonblocking(fd.get(), false);
    set_nodelay(fd.get());
    return fd;
  }
  return Fd();
}

// Each attempt is bounded, so an unreachable address (filtered, unroutable)
// is an error naming it in time rather than minutes past the deadline.
Fd connect_until(const std::string& host, int port, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::string why;
    Fd fd = try_connect(host, port, std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(2000)),
                        &why);
    if (fd.valid()) return fd;
    if (Clock::now() >= deadline) fail("cannot connect to {} {}:{}: {}", what, host, port, why);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void set_keepalive(int fd) {
  const int peer_ms = static_cast<int>(config::peer_timeout_ms());
  if (peer_ms <= 0) return;
  int one = 1, idle = std::max(1, peer_ms / 2000), interval = 1, probes = std::max(1, peer_ms / 2000);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

void set_peer_timeout(int fd) {
  const int peer_ms = static_cast<int>(config::peer_timeout_ms());
  if (peer_ms <= 0) return;
  set_keepalive(fd);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &peer_ms, sizeof peer_ms);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void tune_data_socket(int fd, int buffer_bytes) {
  set_nodelay(fd);
  set_keepalive(fd);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
}

void set_nonblocking(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  ::fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

void write_all(int fd, const void* buf, std::size_t len, const std::string& what) {
  auto* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      ::poll(&pf, 1, 100);
      continue;
    }
    if (n <= 0) fail_io("sending to {}: {}", what, errno_text(errno));
    p += n;
    len -= static_cast<std::size_t>(n);
  }
}

void read_all(int fd, void* buf, std::size_t len, Clock::time_point deadline, const std::string& what) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    pollfd pf{fd, POLLIN, 0};
    int rc = ::poll(&pf, 1, remaining_ms(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) fail_io("timed out reading from {}", what);
    ssize_t n = ::recv(fd, p, len, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0) fail_io("{} closed the connection", what);
    if (n < 0) fail_io("reading from {}: {}", what, errno_text(errno));
    p += n;
    len -= static_cast<std::size_t>(n);
  }
}

}  // namespace kolo::net

namespace kolo {

// kolo.h. The probe socket closes at once: it never accepted, so the port is
// free for the caller's server to bind (a process that takes it in between
// makes that bind fail loudly).
int free_port() { return net::listen_tcp("0.0.0.0", 0, 0, "rendezvous").port; }

}  // namespace kolo
