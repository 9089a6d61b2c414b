// The timeline's file format: Chrome-trace JSON (Perfetto, chrome://tracing),
// written whole or not at all.
#pragma once

#include <string>
#include <string_view>

namespace kolo::detail::timeline {

// s as a JSON string, quotes included.
std::string json_string(std::string_view s);

// The whole file around a list of events, each followed by ",\n".
std::string trace_file(std::string events);

// Writes `text` to path through a temporary file and rename(), so that the
// file is either the old one or the new one, whole. Errors name the path.
void write_whole(const std::string& path, const std::string& text);

}  // namespace kolo::detail::timeline
