#include "net/auth.h"

#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace kolo::auth {

namespace {

constexpr char kMagic[8] = {'K', 'O', 'L', 'O', 'A', 'U', 'T', 'H'};
constexpr unsigned char kVersion = 1;
constexpr unsigned char kFlagOpen = 1;
constexpr unsigned char kAccepted = 0, kRejected = 1;
// Offsets (see the layout in auth.h).
constexpr std::size_t kAnswerMacAt = kAnswerBytes - kMacBytes;    // 56
constexpr std::size_t kVerdictMacAt = kVerdictBytes - kMacBytes;  // 16
// Domain labels: an answer's MAC can never pass for a verdict's, or the reverse.
constexpr std::string_view kAnswerLabel = "kolo-auth-v1 answer";
constexpr std::string_view kVerdictLabel = "kolo-auth-v1 verdict";
constexpr std::string_view kKeyLabel = "kolo-auth-v1 job key:";

void ensure_sodium() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) throw std::runtime_error("kolo: libsodium failed to initialise (sodium_init)");
}

void put_i32(unsigned char* p, std::int32_t v) {
  const auto u = static_cast<std::uint32_t>(v);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(u >> (8 * i));
}

std::int32_t get_i32(const unsigned char* p) {
  std::uint32_t u = 0;
  for (int i = 0; i < 4; ++i) u |= std::uint32_t(p[i]) << (8 * i);
  return static_cast<std::int32_t>(u);
}

bool has_magic(const unsigned char* p) { return std::memcmp(p, kMagic, sizeof kMagic) == 0; }

// What every received message is checked for first: its size, the magic and
// the version. `from_acceptor`: the connector speaks of the acceptor ("it").
bool header_ok(const unsigned char* m, std::size_t len, std::size_t want, bool from_acceptor, std::string* why) {
  if (len != want) {
    *why = fmt::format("handshake of {} bytes, not {}", len, want);
  } else if (!has_magic(m)) {
    *why = from_acceptor ? "it does not speak kolo's handshake" : "not a kolo handshake";
  } else if (m[8] != kVersion) {
    *why = from_acceptor
               ? fmt::format("it speaks handshake version {}, this kolo speaks {} (mixed kolo versions?)", m[8], kVersion)
               : fmt::format("handshake version {}, this kolo speaks {}", m[8], kVersion);
  } else {
    return true;
  }
  return false;
}

// MAC over label | parts..., computed with the streaming interface so that the
// transcript is never copied.
template <class... Parts>
void mac_of(const Key& key, std::string_view label, unsigned char out[kMacBytes],
            const Parts&... parts) {
  crypto_auth_hmacsha512256_state st;
  crypto_auth_hmacsha512256_init(&st, key.data(), Key::kBytes);
  crypto_auth_hmacsha512256_update(&st, reinterpret_cast<const unsigned char*>(label.data()),
                                   label.size());
  (crypto_auth_hmacsha512256_update(&st, parts.first, parts.second), ...);
  crypto_auth_hmacsha512256_final(&st, out);
  sodium_memzero(&st, sizeof st);
}

using Part = std::pair<const unsigned char*, unsigned long long>;

void answer_mac(const Key& key, const Challenge& ch, const unsigned char* answer,
                unsigned char out[kMacBytes]) {
  mac_of(key, kAnswerLabel, out, Part{ch.data(), ch.size()}, Part{answer, kAnswerMacAt});
}

void verdict_mac(const Key& key, const Challenge& ch, const Answer& ans, const unsigned char* verdict,
                 unsigned char out[kMacBytes]) {
  mac_of(key, kVerdictLabel, out, Part{ch.data(), ch.size()}, Part{ans.data(), ans.size()},
         Part{verdict, kVerdictMacAt});
}

bool is_open(const Challenge& ch) { return (ch[10] & kFlagOpen) != 0; }

}  // namespace

Key Key::from_secret(std::string_view secret) {
  ensure_sodium();
  Key k;
  crypto_generichash_state st;
  crypto_generichash_init(&st, nullptr, 0, kBytes);
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(kKeyLabel.data()), kKeyLabel.size());
  crypto_generichash_update(&st, reinterpret_cast<const unsigned char*>(secret.data()), secret.size());
  crypto_generichash_final(&st, k.bytes_.data(), kBytes);
  sodium_memzero(&st, sizeof st);
  return k;
}

Key Key::random() {
  ensure_sodium();
  Key k;
  randombytes_buf(k.bytes_.data(), kBytes);
  return k;
}

Key::~Key() { sodium_memzero(bytes_.data(), bytes_.size()); }

Challenge make_challenge(Channel channel, std::int32_t rank, bool open) {
  ensure_sodium();
  Challenge c{};
  std::memcpy(c.data(), kMagic, sizeof kMagic);
  c[8] = kVersion;
  c[9] = static_cast<unsigned char>(channel);
  c[10] = open ? kFlagOpen : 0;
  put_i32(c.data() + 12, rank);
  randombytes_buf(c.data() + 16, kNonceBytes);
  return c;
}

bool answer_prefix_ok(const unsigned char* a, std::size_t n) {
  if (std::memcmp(a, kMagic, std::min(n, sizeof kMagic)) != 0) return false;
  return n <= 8 || a[8] == kVersion;
}

std::optional<Identity> check_answer(const Key* key, const Challenge& challenge,
                                     const unsigned char* a, std::size_t len, std::string* why) {
  if (!header_ok(a, len, kAnswerBytes, /*from_acceptor=*/false, why)) return std::nullopt;
  if (a[9] != challenge[9]) {
    *why = fmt::format("handshake for channel {}, this is channel {}", a[9], challenge[9]);
    return std::nullopt;
  }
  if (key != nullptr) {
    unsigned char want[kMacBytes];
    answer_mac(*key, challenge, a, want);
    // sodium_memcmp takes the same time wherever the first difference is.
    const bool ok = sodium_memcmp(want, a + kAnswerMacAt, kMacBytes) == 0;
    sodium_memzero(want, sizeof want);
    if (!ok) {
      *why = "wrong credentials (not this job's secret)";
      return std::nullopt;
    }
  }
  Identity id;
  id.rank = get_i32(a + 12);
  id.size = get_i32(a + 16);
  id.peer = get_i32(a + 20);
  return id;
}

Verdict make_verdict(const Key* key, const Challenge& challenge, const Answer& answer, bool accepted) {
  Verdict v{};
  std::memcpy(v.data(), kMagic, sizeof kMagic);
  v[8] = kVersion;
  v[9] = accepted ? kAccepted : kRejected;
  // No proof on a rejection: whoever failed to prove the key learns nothing
  // keyed from us. An open store has no key to prove anything with.
  if (accepted && key != nullptr) verdict_mac(*key, challenge, answer, v.data(), v.data() + kVerdictMacAt);
  return v;
}

std::optional<ParsedChallenge> parse_challenge(const unsigned char* c, std::size_t len, std::string* why) {
  if (!header_ok(c, len, kChallengeBytes, /*from_acceptor=*/true, why)) return std::nullopt;
  if (c[9] != static_cast<unsigned char>(Channel::Store) && c[9] != static_cast<unsigned char>(Channel::Data)) {
    *why = fmt::format("unknown handshake channel {}", c[9]);
    return std::nullopt;
  }
  return ParsedChallenge{static_cast<Channel>(c[9]), (c[10] & kFlagOpen) != 0, get_i32(c + 12)};
}

std::string random_secret() {
  ensure_sodium();
  unsigned char raw[16];
  randombytes_buf(raw, sizeof raw);
  char hex[2 * sizeof raw + 1];
  sodium_bin2hex(hex, sizeof hex, raw, sizeof raw);
  return hex;
}

Answer make_answer(const Key& key, const Challenge& challenge, const Identity& me) {
  ensure_sodium();
  Answer a{};
  std::memcpy(a.data(), kMagic, sizeof kMagic);
  a[8] = kVersion;
  a[9] = challenge[9];
  put_i32(a.data() + 12, me.rank);
  put_i32(a.data() + 16, me.size);
  put_i32(a.data() + 20, me.peer);
  randombytes_buf(a.data() + 24, kNonceBytes);
  answer_mac(key, challenge, a.data(), a.data() + kAnswerMacAt);
  return a;
}

VerdictStatus check_verdict(const Key& key, const Challenge& challenge, const Answer& answer,
                            const unsigned char* v, std::size_t len) {
  if (len != kVerdictBytes || !has_magic(v) || v[8] != kVersion) return VerdictStatus::Malformed;
  if (v[9] == kRejected) return VerdictStatus::Rejected;
  if (v[9] != kAccepted) return VerdictStatus::Malformed;
  if (is_open(challenge)) return VerdictStatus::Accepted;
  unsigned char want[kMacBytes];
  verdict_mac(key, challenge, answer, v, want);
  const bool ok = sodium_memcmp(want, v + kVerdictMacAt, kMacBytes) == 0;
  sodium_memzero(want, sizeof want);
  return ok ? VerdictStatus::Accepted : VerdictStatus::Forged;
}

namespace {

// Reads exactly len bytes by the deadline. Returns "" on success, else what
// happened: "closed" (with *got bytes read), "timeout" or the socket error.
std::string read_exact(int fd, unsigned char* p, std::size_t len, std::size_t* got,
                       std::chrono::steady_clock::time_point deadline) {
  *got = 0;
  while (*got < len) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return "timeout";
    pollfd pfd{fd, POLLIN, 0};
    const int rc = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (rc < 0 && errno != EINTR) return std::strerror(errno);
    if (rc <= 0) continue;
    const ssize_t n = ::recv(fd, p + *got, len - *got, 0);
    if (n == 0) return "closed";
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      // A reset right after our answer is how some stacks report the close.
      return errno == ECONNRESET ? "closed" : std::strerror(errno);
    }
    *got += static_cast<std::size_t>(n);
  }
  return "";
}

std::string send_all(int fd, const unsigned char* p, std::size_t len,
                     std::chrono::steady_clock::time_point deadline) {
  while (len > 0) {
    const ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return "timeout";
      pollfd pfd{fd, POLLOUT, 0};
      ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
      continue;
    }
    return errno == EPIPE || errno == ECONNRESET ? "closed" : std::strerror(errno);
  }
  return "";
}

}  // namespace

Outcome connect_handshake(int fd, const Key& key, Channel channel, const Identity& me,
                          std::chrono::steady_clock::time_point deadline) {
  Outcome out;
  Challenge ch{};
  std::size_t got = 0;
  std::string err = read_exact(fd, ch.data(), ch.size(), &got, deadline);
  if (!err.empty()) {
    // A few bytes that are not kolo's say more than "closed".
    if (got >= sizeof kMagic && !has_magic(ch.data())) {
      out.status = Outcome::NotKolo;
      out.detail = "it does not speak kolo's handshake";
    } else if (err == "closed") {
      out.status = Outcome::Closed;
      out.detail = "it closed the connection before its handshake";
    } else if (err == "timeout") {
      out.status = Outcome::TimedOut;
      out.detail = "no handshake from it in time";
    } else {
      out.detail = err;
    }
    return out;
  }
  std::string why;
  const auto parsed = parse_challenge(ch.data(), ch.size(), &why);
  if (!parsed) {
    out.status = Outcome::NotKolo;
    out.detail = why;
    return out;
  }
  out.acceptor_rank = parsed->rank;
  if (parsed->channel != channel || parsed->rank != me.peer) {
    out.status = Outcome::WrongPeer;
    out.detail = parsed->channel != channel
                     ? fmt::format("it is a kolo {}, not a {}",
                                   parsed->channel == Channel::Store ? "store" : "data listener",
                                   channel == Channel::Store ? "store" : "data listener")
                     : fmt::format("it is rank {}'s data listener, not rank {}'s", parsed->rank, me.peer);
    return out;
  }
  const Answer ans = make_answer(key, ch, me);
  err = send_all(fd, ans.data(), ans.size(), deadline);
  if (!err.empty()) {
    out.status = err == "closed" ? Outcome::Rejected : err == "timeout" ? Outcome::TimedOut : Outcome::IoFailed;
    out.detail = err == "closed" ? "it closed the connection on our credentials" : err;
    return out;
  }
  Verdict v{};
  err = read_exact(fd, v.data(), v.size(), &got, deadline);
  if (!err.empty()) {
    // An acceptor that reads our answer and hangs up has refused it.
    out.status = err == "closed" ? Outcome::Rejected : err == "timeout" ? Outcome::TimedOut : Outcome::IoFailed;
    out.detail = err == "closed" ? "it closed the connection on our credentials"
                 : err == "timeout" ? "no verdict on our credentials in time" : err;
    return out;
  }
  switch (check_verdict(key, ch, ans, v.data(), v.size())) {
    case VerdictStatus::Accepted:
      out.status = Outcome::Accepted;
      out.open = parsed->open;
      break;
    case VerdictStatus::Rejected:
      out.status = Outcome::Rejected;
      out.detail = "it refused our credentials";
      break;
    case VerdictStatus::Forged:
      out.status = Outcome::Forged;
      out.detail = "its proof of the job's secret is wrong";
      break;
    case VerdictStatus::Malformed:
      out.status = Outcome::NotKolo;
      out.detail = "its verdict is not a kolo handshake message";
      break;
  }
  return out;
}

}  // namespace kolo::auth
