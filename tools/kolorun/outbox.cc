#include "outbox.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace kolorun {

Outbox::Outbox(int fd) { reset(fd); }

void Outbox::reset(int fd) {
  fd_ = fd;
  queue_.clear();
  sent_ = 0;
  broken_ = fd < 0;
  if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void Outbox::push(std::string_view bytes) {
  if (broken_) return;
  queue_.append(bytes);
  flush();
}

bool Outbox::flush() {
  while (!broken_ && queued() > 0) {
    ssize_t n = ::write(fd_, queue_.data() + sent_, queued());
    if (n > 0) {
      sent_ += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      break;
    } else {
      broken_ = true;
    }
  }
  if (sent_ == queue_.size() || sent_ > (1u << 20)) {
    queue_.erase(0, sent_);
    sent_ = 0;
  }
  return !broken_;
}

void Outbox::drain(int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (flush() && queued() > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return;
    pollfd p{fd_, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
  }
}

}  // namespace kolorun
