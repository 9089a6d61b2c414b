// Bytes queued for a non-blocking descriptor (the agent's stdout, an agent's
// stdin): the poll loops of kolorun and its agents must never block on a
// write, or a host whose link went down would freeze the loop that is meant
// to notice it.
#pragma once

#include <poll.h>

#include <string>
#include <string_view>

namespace kolorun {

class Outbox {
 public:
  // fd is not owned; it is made non-blocking. -1: everything is dropped.
  explicit Outbox(int fd = -1);
  void reset(int fd);
  int fd() const { return fd_; }
  void push(std::string_view bytes);
  // Writes what the descriptor takes now; false once it failed for good
  // (EPIPE and the like), after which pushes are dropped.
  bool flush();
  // Flushes, waiting up to timeout_ms in all.
  void drain(int timeout_ms);
  std::size_t queued() const { return queue_.size() - sent_; }
  bool broken() const { return broken_; }
  // POLLOUT while something waits to be written.
  short events() const { return queued() > 0 && !broken_ ? POLLOUT : 0; }

 private:
  int fd_ = -1;
  std::string queue_;
  std::size_t sent_ = 0;
  bool broken_ = false;
};

}  // namespace kolorun
