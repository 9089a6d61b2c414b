#include "transport/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "core/config.h"
#include "core/error.h"
#include "rendezvous/store_socket.h"

namespace kolo::transport {

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000 * 1000));
}

sockaddr_in resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) fail("cannot resolve host '{}': {}", host, gai_strerror(rc));
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(res->ai_addr);
  freeaddrinfo(res);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

}  // namespace

Listener listen_on(const std::string& host) {
  sockaddr_in addr = resolve(host, 0);
  Fd fd(rdv::listen_at(reinterpret_cast<sockaddr*>(&addr), sizeof addr, 0,
                       fmt::format("data connections: cannot listen on {}", host))
            .release());
  socklen_t len = sizeof addr;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  return Listener{std::move(fd), ntohs(addr.sin_port)};
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

// Each attempt is bounded (a SYN to an address nobody answers, such as a
// filtered or unroutable one, would otherwise block for minutes past the
// deadline), so an unreachable address is an error naming it in time.
Fd connect_until(const std::string& host, int port, Clock::time_point deadline,
                 const std::string& what) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    std::string why;
    rdv::Fd fd = rdv::try_connect(host, port, std::clamp(left, std::chrono::milliseconds(1),
                                                         std::chrono::milliseconds(2000)), &why);
    if (fd.valid()) return Fd(fd.release());
    if (Clock::now() >= deadline)
      fail("cannot connect to {} {}:{}: {}", what, host, port, why);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void tune_data_socket(int fd, int buffer_bytes) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  rdv::set_keepalive(fd);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer_bytes, sizeof buffer_bytes);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
}

void set_nonblocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
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

void read_all(int fd, void* buf, std::size_t len, Clock::time_point deadline,
              const std::string& what) {
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

}  // namespace kolo::transport
