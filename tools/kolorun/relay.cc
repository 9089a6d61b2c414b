#include "relay.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace kolorun {

namespace {
// A rank that writes megabytes without a line end must not make kolorun
// buffer all of it: past this size the partial line is written as it is.
constexpr std::size_t kMaxPending = 64 * 1024;
}  // namespace

void LineRelay::feed(std::string_view data) {
  std::string out;
  std::size_t i = 0;
  // "\r\n" is one line end: the '\r' already ended the line, so the '\n'
  // that follows is written bare rather than as an empty "[r] " line.
  if (after_cr_ && !data.empty() && data[0] == '\n' && pending_.empty()) {
    out.push_back('\n');
    i = 1;
  }
  if (!data.empty()) after_cr_ = false;
  while (i < data.size()) {
    std::size_t end = data.find_first_of("\r\n", i);
    if (end == std::string_view::npos) {
      pending_.append(data.substr(i));
      break;
    }
    if (data[end] == '\r' && end + 1 < data.size() && data[end + 1] == '\n') ++end;
    pending_.append(data.substr(i, end + 1 - i));
    append_segment(out, pending_, true);
    after_cr_ = data[end] == '\r';
    pending_.clear();
    i = end + 1;
  }
  if (pending_.size() >= kMaxPending) {
    append_segment(out, pending_, false);
    pending_.clear();
  }
  write_out(out);
}

void LineRelay::finish() {
  std::string out;
  if (!pending_.empty()) append_segment(out, pending_, false);
  pending_.clear();
  if (mid_line_ && !prefix_.empty()) out.push_back('\n');
  mid_line_ = false;
  write_out(out);
}

void LineRelay::append_segment(std::string& out, std::string_view text, bool ends_line) {
  if (!mid_line_) out.append(prefix_);
  out.append(text);
  mid_line_ = !ends_line;
}

void LineRelay::write_out(const std::string& out) {
  std::size_t done = 0;
  while (!dest_broken_ && done < out.size()) {
    ssize_t n = ::write(dest_, out.data() + done, out.size() - done);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      // Our stdout was handed to us non-blocking: wait for room rather than
      // dropping lines.
      pollfd p{dest_, POLLOUT, 0};
      ::poll(&p, 1, 1000);
    } else {
      // EPIPE (the reader of kolorun's output went away) and the like: the
      // job goes on, its output has nowhere to go.
      dest_broken_ = true;
    }
  }
}

}  // namespace kolorun
