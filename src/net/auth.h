// Who may talk to a job: every store connection and every data connection
// proves knowledge of the job's secret before anything else on it is read.
//
// The handshake is a challenge-response with a MAC (libsodium's crypto_auth,
// HMAC-SHA-512-256), keyed by a hash of the secret, mutual, and made of three
// fixed-size messages, so that nothing a peer sends before it has proved
// itself is ever taken as a length:
//
//   acceptor  -> connector  Challenge  48 bytes: magic, version, channel, the
//                                      acceptor's rank, a fresh random nonce
//   connector -> acceptor   Answer     88 bytes: the connector's identity
//                                      (rank, size, the rank it means to reach),
//                                      its own nonce, and
//                                      MAC(key, "answer" | challenge | answer head)
//   acceptor  -> connector  Verdict    48 bytes: accepted or rejected, and
//                                      MAC(key, "verdict" | challenge | answer | verdict head)
//
// The acceptor checks the answer's MAC in constant time; the connector checks
// the verdict's, which proves the acceptor holds the key too: a rank never
// joins a store or a peer of another job (a stale store on a reused port, a
// stale rank of an earlier run). Every MAC covers both nonces and the whole
// exchange, so nothing can be replayed or moved to another connection,
// channel or rank.
//
// Layout, all integers little-endian:
//   Challenge: "KOLOAUTH" | u8 version | u8 channel | u8 flags | u8 0 | i32 rank | nonce[32]
//   Answer:    "KOLOAUTH" | u8 version | u8 channel | u16 0 | i32 rank | i32 size | i32 peer |
//              nonce[32] | mac[32]
//   Verdict:   "KOLOAUTH" | u8 version | u8 status | u16 0 | u32 0 | mac[32]
//
// Where the secret comes from: KOLO_SECRET (kolorun makes a random one per
// job). Other launchers do not, and then the ranks derive a common key from
// what they share (job id, store address); see job_key() in connect_store.cc.
//
// It lives in net/, below both of its users: the store (rendezvous/) and the
// data connections (transport/).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kolo::auth {

inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kMacBytes = 32;
inline constexpr std::size_t kChallengeBytes = 48;
inline constexpr std::size_t kAnswerBytes = 88;
inline constexpr std::size_t kVerdictBytes = 48;

// How long an acceptor waits for a connection's answer before dropping it:
// a connection that never speaks must not hold a slot for long.
inline constexpr std::chrono::milliseconds kAnswerTimeout{10000};

using Challenge = std::array<unsigned char, kChallengeBytes>;
using Answer = std::array<unsigned char, kAnswerBytes>;
using Verdict = std::array<unsigned char, kVerdictBytes>;

enum class Channel : std::uint8_t { Store = 1, Data = 2 };

// The MAC key of a job, derived from its secret. Wiped when destroyed.
class Key {
 public:
  static constexpr std::size_t kBytes = 32;
  // Any text works as a secret; a strong one is long and random
  // (kolorun's: 32 hex digits from /dev/urandom).
  static Key from_secret(std::string_view secret);
  // A fresh random key (a store no other process needs to reach).
  static Key random();

  Key(const Key& o) : bytes_(o.bytes_) {}
  Key& operator=(const Key& o) = default;
  ~Key();
  const unsigned char* data() const { return bytes_.data(); }

 private:
  Key() = default;
  std::array<unsigned char, kBytes> bytes_{};
};

// What a connector claims to be, covered by its MAC.
struct Identity {
  std::int32_t rank = -1;  // -1: not a rank (a tool, a test)
  std::int32_t size = 0;   // the job's size as the connector knows it; 0: unknown
  std::int32_t peer = -1;  // the rank it means to reach; -1: the store
};

// --- acceptor side (pure functions; the caller does the I/O) -----------------

// A challenge with a fresh random nonce. `rank` is the acceptor's (-1: the
// store). `open`: the acceptor holds no key and checks nothing (only a store
// started without the job's key does this; see StoreServer).
Challenge make_challenge(Channel channel, std::int32_t rank, bool open = false);

// False as soon as the first n bytes received cannot begin an answer (a port
// scanner, an HTTP request): the acceptor drops such a connection at once
// instead of waiting for all kAnswerBytes.
bool answer_prefix_ok(const unsigned char* bytes, std::size_t n);

// Checks an answer to `challenge`: format, channel and (with a key) the MAC,
// in constant time. The identity is only returned when the MAC is right;
// otherwise *why says what was wrong, for the acceptor's log.
std::optional<Identity> check_answer(const Key* key, const Challenge& challenge,
                                     const unsigned char* answer, std::size_t len,
                                     std::string* why);

// The acceptor's reply. Accepted with a key: carries the acceptor's proof.
Verdict make_verdict(const Key* key, const Challenge& challenge, const Answer& answer,
                     bool accepted);

// --- connector side ---------------------------------------------------------

// A fresh random secret, 32 hex digits (rank 0's for a job no launcher gave one).
std::string random_secret();

struct ParsedChallenge {
  Channel channel;
  bool open;
  std::int32_t rank;
};
// Checks a challenge's format; nullopt (and *why) when it is not one.
std::optional<ParsedChallenge> parse_challenge(const unsigned char* bytes, std::size_t len,
                                               std::string* why);

// The answer to a challenge, with a fresh nonce of the connector's own.
Answer make_answer(const Key& key, const Challenge& challenge, const Identity& me);

enum class VerdictStatus { Accepted, Rejected, Forged, Malformed };
// Accepted only when the verdict says so and (unless the challenge was open)
// its MAC proves the acceptor holds the key; Forged when it does not.
VerdictStatus check_verdict(const Key& key, const Challenge& challenge, const Answer& answer,
                            const unsigned char* verdict, std::size_t len);

// The whole connector side on a blocking socket: reads the challenge, sends
// the answer, reads the verdict, all by `deadline`.
struct Outcome {
  enum Status {
    Accepted,      // the acceptor proved the key (or was open: see `open`)
    Rejected,      // the acceptor refused our answer, or closed after reading it
    Forged,        // the verdict's proof is wrong: the acceptor does not hold the key
    NotKolo,       // the acceptor sent something that is not a kolo challenge
    WrongPeer,     // a kolo challenge, but of another channel or rank
    Closed,        // closed before its challenge was complete
    TimedOut,      // no challenge or verdict by the deadline
    IoFailed,      // a socket error
  } status = IoFailed;
  bool open = false;            // Accepted from an acceptor that checks nothing
  std::int32_t acceptor_rank = -1;
  std::string detail;           // for the error message
};
Outcome connect_handshake(int fd, const Key& key, Channel channel, const Identity& me,
                          std::chrono::steady_clock::time_point deadline);

}  // namespace kolo::auth
