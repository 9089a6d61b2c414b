// The hosts of an elastic job: Horovod's --host-discovery-script contract.
// The script (any executable; run with no arguments, stdin /dev/null) prints
// the hosts available now, one per line, "host:slots", "host slots=N" or
// "host" (--slots-per-host slots); no line: no host. kolorun runs it again
// every second. A script that exits non-zero, prints something that does not
// parse or runs longer than kScriptLimit fails that run: fatal for the first
// run, a warning (the previous list stays) afterwards.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "hosts.h"

namespace kolorun {

inline constexpr auto kScriptLimit = std::chrono::seconds(10);

struct Discovered {
  bool ok = false;
  std::vector<HostSlots> hosts;  // in the script's order; one entry per name (slots added up)
  std::string error;             // !ok: what went wrong, naming the script
};

Discovered discover_hosts(const std::string& script, int slots_per_host);

}  // namespace kolorun
