// kolorun's own messages on stderr: "kolorun: <text>" (or "<who>: <text>"
// from an agent), one write() per line so that they never interleave with
// the relayed output of the ranks mid-line.
#pragma once

#include <unistd.h>

#include <string>

namespace kolorun {

inline void say_as(const std::string& who, const std::string& text) {
  const std::string line = who + ": " + text + "\n";
  [[maybe_unused]] const ssize_t ignored = ::write(2, line.data(), line.size());
}

inline void say(const std::string& text) { say_as("kolorun", text); }

}  // namespace kolorun
