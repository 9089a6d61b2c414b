#include "hosts.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kolorun {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

// A positive slot count; `what` names the entry in the error.
int parse_slots(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  long v = 0;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || v < 1 || v > 1000000)
    throw HostListError(fmt::format("{}: the slot count must be a positive integer, got '{}'", what, text));
  return static_cast<int>(v);
}

void check_name(const std::string& name, const std::string& what) {
  if (name.empty()) throw HostListError(fmt::format("{}: empty host name", what));
  // The name reaches ssh's command line as one argument: anything that could
  // read as an option or hold whitespace is refused rather than passed on.
  if (name[0] == '-' || name.find_first_of(" \t,=") != std::string::npos)
    throw HostListError(fmt::format("{}: '{}' is not a host name", what, name));
}

// "host" or "host:N".
HostSlots parse_entry(const std::string& entry, const std::string& what) {
  HostSlots h;
  const auto colon = entry.rfind(':');
  if (colon == std::string::npos) {
    h.name = entry;
  } else {
    h.name = entry.substr(0, colon);
    h.slots = parse_slots(entry.substr(colon + 1), what);
  }
  check_name(h.name, what);
  return h;
}

}  // namespace

std::vector<HostSlots> parse_host_list(const std::string& list) {
  std::vector<HostSlots> hosts;
  std::size_t start = 0;
  for (;;) {
    const auto comma = list.find(',', start);
    const std::string entry = trim(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    hosts.push_back(parse_entry(entry, fmt::format("-H entry '{}'", entry)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return hosts;
}

std::vector<HostSlots> parse_host_lines(std::istream& in, const std::string& source, int default_slots) {
  std::vector<HostSlots> hosts;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    const std::string what = fmt::format("{} line {}", source, lineno);
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string first;
    if (!(words >> first)) continue;  // blank or comment
    HostSlots h = parse_entry(first, what);
    bool slots_seen = first.find(':') != std::string::npos;
    if (!slots_seen) h.slots = default_slots;
    for (std::string w; words >> w;) {
      if (w.rfind("slots=", 0) == 0 && !slots_seen) {
        h.slots = parse_slots(w.substr(6), what);
        slots_seen = true;
      } else if (w.rfind("max_slots=", 0) == 0) {
        parse_slots(w.substr(10), what);
      } else {
        throw HostListError(fmt::format("{}: unexpected '{}' (expected 'host slots=N')", what, w));
      }
    }
    hosts.push_back(h);
  }
  return hosts;
}

std::vector<HostSlots> parse_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw HostListError(fmt::format("cannot read hostfile '{}': {}", path, std::strerror(errno)));
  std::vector<HostSlots> hosts = parse_host_lines(in, fmt::format("hostfile '{}'", path), 1);
  if (hosts.empty()) throw HostListError(fmt::format("hostfile '{}' names no host", path));
  return hosts;
}

int total_slots(const std::vector<HostSlots>& hosts) {
  int n = 0;
  for (const auto& h : hosts) n += h.slots;
  return n;
}

std::vector<HostRanks> place_ranks(const std::vector<HostSlots>& hosts, int np,
                                   const std::function<bool(const std::string&)>& is_local) {
  std::vector<HostRanks> placed;
  auto host_for = [&](const std::string& name) -> HostRanks& {
    const bool local = is_local(name);
    for (auto& h : placed) {
      if (local ? h.local : (!h.local && h.name == name)) return h;
    }
    placed.push_back(HostRanks{name, local, {}});
    return placed.back();
  };
  int next = 0;
  for (const auto& entry : hosts) {
    if (next == np) break;
    HostRanks& h = host_for(entry.name);
    for (int s = 0; s < entry.slots && next < np; ++s) h.ranks.push_back(next++);
  }
  return placed;
}

}  // namespace kolorun
