#include "core/log.h"

#include <cstdio>
#include <string>

#include "core/config.h"
#include "core/error.h"

namespace kolo {

namespace {
LogLevel level_from_env() {
  const std::string v = config::log_level();
  if (v == "error") return LogLevel::Error;
  if (v == "info") return LogLevel::Info;
  if (v == "debug") return LogLevel::Debug;
  return LogLevel::Warn;
}
}  // namespace

bool log_enabled(LogLevel level) {
  static const LogLevel threshold = level_from_env();
  return level <= threshold;
}

void log_line(LogLevel level, std::string_view text) {
  static const char* names[] = {"error", "warning", "info", "debug"};
  // One fprintf per line so that lines of concurrent threads do not interleave.
  std::string line = fmt::format("{}{}: {}\n", rank_prefix(), names[static_cast<int>(level)], text);
  std::fputs(line.c_str(), stderr);
}

}  // namespace kolo
