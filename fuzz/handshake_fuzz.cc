// libFuzzer target: the authentication handshake of store and data
// connections (net/auth.h), the only bytes kolo reads from a peer
// before it has proved it holds the job's key. The input is taken as
//   challenge (48 bytes) | answer (88 bytes) | verdict (48 bytes)
// (shorter inputs: whatever pieces there are, at any length), and fed to
// the acceptor's and the connector's parsers, and through a socket pair to
// the connector's whole blocking handshake. Checks, besides "no crash":
//   - the quick prefix check never refuses an answer the full check accepts;
//   - an answer made for a challenge that parses is accepted, and its verdict too;
//   - a verdict made by another key is never accepted.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "net/auth.h"

namespace auth = kolo::auth;

namespace {

const auth::Key& key() {
  static const auth::Key k = auth::Key::from_secret("kolo fuzz secret");
  return k;
}
const auth::Key& other_key() {
  static const auth::Key k = auth::Key::from_secret("another job");
  return k;
}

template <class Array>
Array take(const std::uint8_t* p, std::size_t n) {
  Array a{};
  std::copy(p, p + std::min(n, a.size()), a.begin());
  return a;
}

void whole_connector(const std::uint8_t* data, std::size_t size) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return;
  // The acceptor's side says: its challenge, then its verdict, then hangs up.
  const std::size_t head = std::min(size, auth::kChallengeBytes);
  [[maybe_unused]] ssize_t n = ::send(sv[1], data, head, MSG_NOSIGNAL);
  if (size > auth::kChallengeBytes + auth::kAnswerBytes) {
    const std::size_t at = auth::kChallengeBytes + auth::kAnswerBytes;
    n = ::send(sv[1], data + at, size - at, MSG_NOSIGNAL);
  }
  ::shutdown(sv[1], SHUT_WR);
  const auth::Outcome o = auth::connect_handshake(sv[0], key(), auth::Channel::Data, {1, 2, 0},
                                                  std::chrono::steady_clock::now() + std::chrono::seconds(1));
  // Our fresh nonce makes any canned verdict's proof wrong.
  if (o.status == auth::Outcome::Accepted && !o.open) std::abort();
  ::close(sv[0]);
  ::close(sv[1]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string why;
  // Every piece at any length, as a short read would leave it.
  auth::parse_challenge(data, size, &why);
  for (std::size_t i = 0; i <= std::min<std::size_t>(size, auth::kAnswerBytes); ++i) auth::answer_prefix_ok(data, i);

  const auto ch = take<auth::Challenge>(data, size);
  const auto parsed = auth::parse_challenge(ch.data(), ch.size(), &why);
  if (parsed) {
    // The honest connector's answer to it passes, and so does the honest verdict.
    const auth::Answer mine = auth::make_answer(key(), ch, {1, 4, parsed->rank});
    const auto who = auth::check_answer(&key(), ch, mine.data(), mine.size(), &why);
    if (!who || who->peer != parsed->rank) std::abort();
    const auth::Verdict v = auth::make_verdict(&key(), ch, mine, true);
    if (auth::check_verdict(key(), ch, mine, v.data(), v.size()) != auth::VerdictStatus::Accepted) std::abort();
    const auth::Verdict forged = auth::make_verdict(&other_key(), ch, mine, true);
    if (!parsed->open && auth::check_verdict(key(), ch, mine, forged.data(), forged.size()) == auth::VerdictStatus::Accepted)
      std::abort();
  }

  if (size > auth::kChallengeBytes) {
    const std::uint8_t* a = data + auth::kChallengeBytes;
    const std::size_t alen = std::min(size - auth::kChallengeBytes, auth::kAnswerBytes);
    for (const auth::Key* k : {&key(), static_cast<const auth::Key*>(nullptr)}) {
      const auto who = auth::check_answer(k, ch, a, alen, &why);
      if (who)
        for (std::size_t i = 0; i <= alen; ++i)
          if (!auth::answer_prefix_ok(a, i)) std::abort();
    }
    if (size > auth::kChallengeBytes + auth::kAnswerBytes) {
      const auto ans = take<auth::Answer>(a, alen);
      const std::uint8_t* v = a + auth::kAnswerBytes;
      const std::size_t vlen = size - auth::kChallengeBytes - auth::kAnswerBytes;
      auth::check_verdict(key(), ch, ans, v, vlen);
    }
  }
  whole_connector(data, size);
  return 0;
}
