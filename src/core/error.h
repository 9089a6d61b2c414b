// Errors and invariant checks (Gloo's enforce style): a failed check throws
// kolo::Error whose text starts with "kolo rank R:" so that every message in a
// multi-rank log says where it came from.
#pragma once

#include <fmt/format.h>

#include <string>

#include "kolo/kolo.h"

namespace kolo {

// The rank this process speaks for in messages (-1 before init()).
void set_log_rank(int rank);
int log_rank();

// rank_prefix() ("kolo rank 3: ", "kolo: " before init) is public: kolo.h.

// Throws E with the rank prefix and a {fmt} message.
template <class E, class... Args>
[[noreturn]] void fail_as(fmt::format_string<Args...> f, Args&&... args) {
  throw E(rank_prefix() + fmt::format(f, std::forward<Args>(args)...));
}

// A peer or socket went away: callers may want to tell it apart from misuse.
class IoError : public Error {
 public:
  using Error::Error;
};

// A peer stayed silent past KOLO_TIMEOUT_MS (alive, as far as the transport
// can tell): the communicator then asks every rank where it is (roll call).
class TimeoutError : public IoError {
 public:
  using IoError::IoError;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  fail_as<Error>(f, std::forward<Args>(args)...);
}
template <class... Args>
[[noreturn]] void fail_io(fmt::format_string<Args...> f, Args&&... args) {
  fail_as<IoError>(f, std::forward<Args>(args)...);
}
template <class... Args>
[[noreturn]] void fail_timeout(fmt::format_string<Args...> f, Args&&... args) {
  fail_as<TimeoutError>(f, std::forward<Args>(args)...);
}

// errno as text, for system-call failures.
std::string errno_text(int err);

}  // namespace kolo

#define KOLO_CHECK(cond, ...)                    \
  do {                                           \
    if (!(cond)) ::kolo::fail(__VA_ARGS__);      \
  } while (0)

// Prints both sides: KOLO_CHECK_EQ(a, b, "what") -> "what: a (=3) != b (=4)".
#define KOLO_CHECK_EQ(a, b, what)                                                         \
  do {                                                                                    \
    const auto& kolo_a_ = (a);                                                            \
    const auto& kolo_b_ = (b);                                                            \
    if (!(kolo_a_ == kolo_b_))                                                            \
      ::kolo::fail("{}: {} (={}) != {} (={})", what, #a, kolo_a_, #b, kolo_b_);           \
  } while (0)
