// Who the members of a sub-group (a host's shared-memory group, or the TCP
// mesh joining the ranks of equal local index across hosts) are in the whole
// job. The transports number their members 0..n-1; every message they write
// names the job's rank and, when ranks span hosts, its host, so that an error
// on host a about a peer lost on host b says which rank and which host.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

namespace kolo::transport {

struct Members {
  std::vector<int> ranks;          // job rank of each member; empty: members are the job's ranks
  std::vector<std::string> hosts;  // host of each member; empty: do not name hosts

  int global(int member) const { return ranks.empty() ? member : ranks[member]; }
  // "rank 5" or "rank 5 (host b)".
  std::string name(int member) const {
    if (hosts.empty()) return fmt::format("rank {}", global(member));
    return fmt::format("rank {} (host {})", global(member), hosts[member]);
  }
};

}  // namespace kolo::transport
