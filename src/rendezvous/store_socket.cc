#include "rendezvous/store_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <random>

#include "core/config.h"
#include "core/error.h"

namespace kolo::rdv {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

Fd::~Fd() { reset(); }

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

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

}  // namespace

namespace {

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

Fd listen_tcp(const std::string& host, int port, int* bound_port) {
  std::string why;
  AddrList addrs = resolve(host, port, /*passive=*/true, &why);
  if (!addrs) fail("rendezvous: cannot listen on {}:{}: {}", host, port, why);
  const addrinfo* a = addrs.get();
  Fd fd = listen_at(a->ai_addr, a->ai_addrlen, SOCK_NONBLOCK,
                    fmt::format("rendezvous: cannot listen on {}:{}", host, port));
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  *bound_port = port_of(reinterpret_cast<const sockaddr*>(&ss));
  return fd;
}

Fd try_connect(const std::string& host, int port, std::chrono::milliseconds timeout,
               std::string* why) {
  AddrList addrs = resolve(host, port, /*passive=*/false, why);
  if (!addrs) return Fd();
  for (const addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      *why = fmt::format("socket(): {}", errno_text(errno));
      continue;
    }
    // Non-blocking connect bounded by poll: a SYN to a host that is down can
    // otherwise block for minutes, far past the caller's deadline.
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
    // The client does blocking I/O with its own deadlines (poll before recv).
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    set_nodelay(fd.get());
    return fd;
  }
  return Fd();
}

std::string address_text(const sockaddr* a, bool with_port) {
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(a);
    ::inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
    port = ntohs(in->sin_port);
    return with_port ? fmt::format("{}:{}", ip, port) : std::string(ip);
  }
  if (a->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
    port = ntohs(in6->sin6_port);
    return with_port ? fmt::format("[{}]:{}", ip, port) : std::string(ip);
  }
  return "?";
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

}  // namespace kolo::rdv

namespace kolo {

// kolo.h. The probe socket closes at once: it never accepted, so the port is
// free for the caller's server to bind (a process that takes it in between
// makes that bind fail loudly).
int free_port() {
  int port = 0;
  rdv::listen_tcp("0.0.0.0", 0, &port);
  return port;
}

}  // namespace kolo
