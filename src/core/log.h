// Diagnostics to stderr, one line each, prefixed with the rank. Level from
// KOLO_LOG (error, warn, info, debug); default warn.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace kolo {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

bool log_enabled(LogLevel level);
void log_line(LogLevel level, std::string_view text);

template <class... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (log_enabled(level)) log_line(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kolo
