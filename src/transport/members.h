// Who the members of a sub-group (a host's shared-memory group, or the TCP
// mesh joining the ranks of equal local index across hosts) are in the
// communicator, and who those are in the whole job. The transports number
// their members 0..n-1; every message they write names the communicator's
// rank, its job ("world") rank when the communicator is a subgroup
// (Communicator::split), and, when ranks span hosts, its host, so that an
// error on host a about a peer lost on host b says which rank and which host.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

namespace kolo::transport {

struct Members {
  std::vector<int> ranks;          // communicator rank of each member; empty: members are its ranks
  std::vector<std::string> hosts;  // host of each member; empty: do not name hosts
  // World rank of each communicator rank; null: the communicator is the world.
  std::shared_ptr<const std::vector<int>> world;

  int global(int member) const { return ranks.empty() ? member : ranks[member]; }
  // "rank 5", or in a subgroup "rank 1 (world rank 5)".
  std::string label(int member) const {
    const int r = global(member);
    if (!world) return fmt::format("rank {}", r);
    return fmt::format("rank {} (world rank {})", r, (*world)[r]);
  }
  // "rank 5 (host b)", or in a subgroup "rank 1 (world rank 5, host b)".
  std::string name(int member) const {
    if (hosts.empty()) return label(member);
    const int r = global(member);
    if (!world) return fmt::format("rank {} (host {})", r, hosts[member]);
    return fmt::format("rank {} (world rank {}, host {})", r, (*world)[r], hosts[member]);
  }
};

}  // namespace kolo::transport
