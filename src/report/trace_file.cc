#include "report/trace_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace kolo::detail::timeline {

namespace {

void escape(std::string& out, std::string_view s) {
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      out += fmt::format("\\u{:04x}", u);
    } else {
      out += ch;
    }
  }
}

}  // namespace

std::string json_string(std::string_view s) {
  std::string out = "\"";
  escape(out, s);
  out += '"';
  return out;
}

void write_whole(const std::string& path, const std::string& text) {
  const std::string tmp = fmt::format("{}.tmp{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("timeline: cannot write {}: {}", path, std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("timeline: cannot write {}: {}", path, std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("timeline: cannot write {}: {}", path, std::strerror(err));
  }
}

std::string trace_file(std::string events) {
  if (events.ends_with(",\n")) events.resize(events.size() - 2);
  return "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n" + events + "\n]}\n";
}

}  // namespace kolo::detail::timeline
