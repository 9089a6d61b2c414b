// Thin RAII wrappers over TCP sockets for kolo's data connections.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>

namespace kolo::transport {

using Clock = std::chrono::steady_clock;

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) { reset(); fd_ = std::exchange(o.fd_, -1); }
    return *this;
  }
  ~Fd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset();

 private:
  int fd_ = -1;
};

// A listening socket on host (e.g. "0.0.0.0") and an ephemeral port.
struct Listener {
  Fd fd;
  int port = 0;
};
Listener listen_on(const std::string& host);

// Accepts one connection, failing after the deadline with `what` in the message.
Fd accept_until(const Listener& l, Clock::time_point deadline, const std::string& what);

// Connects to host:port, retrying refused connections until the deadline.
Fd connect_until(const std::string& host, int port, Clock::time_point deadline,
                 const std::string& what);

// Low latency, large buffers: what every data connection wants.
void tune_data_socket(int fd, int buffer_bytes);
void set_nonblocking(int fd, bool on);

// Blocking helpers for handshakes (not the data path).
void write_all(int fd, const void* buf, std::size_t len, const std::string& what);
void read_all(int fd, void* buf, std::size_t len, Clock::time_point deadline,
              const std::string& what);

}  // namespace kolo::transport
