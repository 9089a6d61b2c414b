// CacheWriter: an unnamed temporary file (O_TMPFILE) in the target's
// directory, filled sequentially, fsynced, linked as <path>.partial and
// renamed over <path>. Until the link the file has no name, so a process
// killed even by SIGKILL leaves nothing; the kernel frees it.
#include "data_cache_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "data_error.h"

namespace kolo::data::detail {

namespace {

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

constexpr std::size_t kFlushBytes = 4 << 20;

}  // namespace

CacheWriter::CacheWriter(std::string path, CacheSpec spec)
    : path_(std::move(path)), partial_(partial_path(path_)), spec_(std::move(spec)) {
  fd_ = ::open(dir_of(path_).c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0644);
  if (fd_ < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // No O_TMPFILE here: a named temporary file (the next build replaces it).
    named_ = true;
    fd_ = ::open(partial_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  if (fd_ < 0)
    fail("cannot create the cache '{}' (a temporary file in '{}'): {}", path_, dir_of(path_),
                   errno_text(errno));
  // Records start after the header, which commit() writes last.
  if (::lseek(fd_, static_cast<off_t>(kHeaderBytes), SEEK_SET) < 0)
    fail("cannot seek in the cache '{}': {}", path_, errno_text(errno));
  index_.reserve(3 * spec_.num_samples);
  buf_.reserve(kFlushBytes + (1 << 16));
}

CacheWriter::~CacheWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && named_) ::unlink(partial_.c_str());
}

void CacheWriter::write(const void* p, std::uint64_t n) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  buf_.insert(buf_.end(), b, b + n);
  pos_ += n;
  if (buf_.size() >= kFlushBytes) flush();
}

void CacheWriter::flush() {
  crc_ = crc32_update(crc_, buf_.data(), buf_.size());
  const std::uint8_t* p = buf_.data();
  std::size_t n = buf_.size();
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("cannot write the cache '{}': {}", path_, errno_text(errno));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  buf_.clear();
}

void CacheWriter::append(const std::uint8_t* data, std::uint64_t bytes, std::int64_t label) {
  static const std::uint8_t zeros[kAlign] = {};
  index_.push_back(pos_);
  index_.push_back(bytes);
  index_.push_back(static_cast<std::uint64_t>(label));
  write(data, bytes);
  write(zeros, align_up(pos_) - pos_);
}

std::uint64_t CacheWriter::commit() {
  Header h;
  h.spec = spec_;
  h.index_offset = pos_;  // records end 64-aligned
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the index is written as host integers");
  write(index_.data(), index_.size() * 8);
  flush();
  h.file_size = pos_;
  h.payload_crc = crc_;
  const std::string header = encode_header(h);
  if (::pwrite(fd_, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size()))
    fail("cannot write the cache '{}': {}", path_, errno_text(errno));
  if (::fsync(fd_) != 0) fail("cannot fsync the cache '{}': {}", path_, errno_text(errno));
  if (!named_) {
    // Give the unnamed file a name. A .partial left by a build killed
    // between link and rename (or by a named build) is ours to replace.
    ::unlink(partial_.c_str());
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, partial_.c_str(), AT_SYMLINK_FOLLOW) != 0)
      fail("cannot link the cache '{}' as '{}': {}", path_, partial_, errno_text(errno));
    named_ = true;
  }
  if (::rename(partial_.c_str(), path_.c_str()) != 0)
    fail("cannot rename '{}' to '{}': {}", partial_, path_, errno_text(errno));
  committed_ = true;
  const int dfd = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: some file systems refuse fsync on directories
    ::close(dfd);
  }
  return h.file_size;
}

}  // namespace kolo::data::detail
