// Helpers of the security tests: raw sockets that play intruders, and the
// log lines they should produce.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "net/auth.h"

namespace kolo::sectest {

using namespace std::chrono_literals;

inline const auth::Key& job_key() {
  static const auth::Key k = auth::Key::from_secret("3f6c0e1d2b4a59687f8e9dacbdcefd0e");
  return k;
}
inline const auth::Key& other_key() {
  static const auth::Key k = auth::Key::from_secret("00000000000000000000000000000000");
  return k;
}

// A blocking TCP connection to 127.0.0.1:port that does whatever a test says.
class Raw {
 public:
  explicit Raw(int port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << "connect to port " << port;
  }
  ~Raw() { ::close(fd_); }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;

  int fd() const { return fd_; }

  void send(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  }
  void send(const void* p, std::size_t n) { send(std::string(static_cast<const char*>(p), n)); }

  // Reads exactly n bytes; "" if the connection ends first or nothing comes in 5 s.
  std::string read(std::size_t n) {
    std::string out;
    char buf[256];
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 5000) != 1) return "";
      const ssize_t got = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (got <= 0) return "";
      out.append(buf, got);
    }
    return out;
  }

  // True when the peer closes the connection within the timeout; what it
  // sent before (a reject verdict) is skipped.
  bool closed_by_peer(std::chrono::milliseconds timeout = 5000ms) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    char buf[256];
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) != 1) return false;
      const ssize_t got = ::recv(fd_, buf, sizeof buf, 0);
      if (got <= 0) return true;
    }
  }

  // The whole connector side of the handshake.
  auth::Outcome handshake(const auth::Key& key, auth::Channel channel, const auth::Identity& me) {
    return auth::connect_handshake(fd_, key, channel, me, std::chrono::steady_clock::now() + 5s);
  }

 private:
  int fd_;
};

inline std::string length_prefix(std::uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return s;
}

inline std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace kolo::sectest
