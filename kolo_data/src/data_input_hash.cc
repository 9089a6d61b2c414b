// InputHash: a 64-bit BLAKE2b digest (libsodium) of what a cache is built
// from, so that a cache built from other inputs is recognised as stale.
#include <fcntl.h>
#include <sodium.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "data_error.h"
#include "kolo/data/cache.h"

namespace kolo::data {

namespace {
crypto_generichash_state* st(unsigned char* p) { return reinterpret_cast<crypto_generichash_state*>(p); }
const crypto_generichash_state* st(const unsigned char* p) {
  return reinterpret_cast<const crypto_generichash_state*>(p);
}
}  // namespace

static_assert(sizeof(crypto_generichash_state) <= 384 && alignof(crypto_generichash_state) <= 64,
              "InputHash::state_ is too small for libsodium's state");

InputHash::InputHash() {
  if (sodium_init() < 0) fail("InputHash: libsodium failed to initialise");
  crypto_generichash_init(st(state_), nullptr, 0, 8);
}

InputHash::~InputHash() = default;

InputHash& InputHash::bytes(const void* p, std::size_t n) {
  crypto_generichash_update(st(state_), static_cast<const unsigned char*>(p), n);
  return *this;
}

InputHash& InputHash::number(std::uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  return bytes(b, sizeof b);
}

InputHash& InputHash::text(const std::string& s) { return number(s.size()).bytes(s.data(), s.size()); }

InputHash& InputHash::file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("InputHash: cannot open input '{}': {}", path, errno_text(errno));
  std::vector<unsigned char> buf(1 << 20);
  std::uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      fail("InputHash: cannot read input '{}': {}", path, errno_text(e));
    }
    if (n == 0) break;
    bytes(buf.data(), static_cast<std::size_t>(n));
    total += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  return number(total);  // ends the file: (a+b, c) hashes differently from (a, b+c)
}

std::uint64_t InputHash::value() const {
  // Finalising consumes the state: finish a copy so that value() can be
  // called again and more added afterwards.
  crypto_generichash_state copy = *st(state_);
  unsigned char out[8];
  crypto_generichash_final(&copy, out, sizeof out);
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{out[i]} << (8 * i);
  return v;
}

}  // namespace kolo::data
