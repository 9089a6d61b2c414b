#include "core/error.h"

#include <cstring>

namespace kolo {

namespace {
int g_rank = -1;
}

void set_log_rank(int rank) { g_rank = rank; }
int log_rank() { return g_rank; }

std::string rank_prefix() {
  return g_rank < 0 ? std::string("kolo: ") : fmt::format("kolo rank {}: ", g_rank);
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r may return a static string instead of filling buf.
  return std::string(strerror_r(err, buf, sizeof buf));
}

}  // namespace kolo
