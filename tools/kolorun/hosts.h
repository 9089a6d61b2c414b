// The hosts of a multi-host job: `-H a:2,b:2` or a hostfile, and which ranks
// each host runs.
//
// Syntax, as Open MPI and Horovod read it:
//   -H a:2,b:2,c        host:slots, a bare host is 1 slot
//   hostfile lines      "a slots=2", "a:2" or "a"; '#' starts a comment;
//                       "max_slots=N" is accepted and ignored (mpirun's
//                       oversubscription limit has no meaning here)
// Ranks fill the hosts in the order given: host 1 gets its slots' worth of
// ranks, then host 2, ...; -np defaults to the total number of slots (as
// mpirun with a hostfile) and may be smaller, leaving the last hosts with
// fewer ranks or none.
#pragma once

#include <functional>
#include <istream>
#include <stdexcept>
#include <string>
#include <vector>

namespace kolorun {

struct HostSlots {
  std::string name;
  int slots = 1;
};

// A malformed -H list or hostfile; the message names the entry (and the
// file and line).
class HostListError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::vector<HostSlots> parse_host_list(const std::string& list);
std::vector<HostSlots> parse_hostfile(const std::string& path);
// Hostfile lines from any stream (a discovery script's output); `source`
// names it in errors; a bare host gets default_slots. May be empty.
std::vector<HostSlots> parse_host_lines(std::istream& in, const std::string& source, int default_slots);

int total_slots(const std::vector<HostSlots>& hosts);

// One host of the job with the global ranks it runs, in increasing order.
struct HostRanks {
  std::string name;        // as the user wrote it (the first spelling, when merged)
  bool local = false;      // the launching host: its ranks start without ssh
  std::vector<int> ranks;
};

// Places np ranks on the hosts (np <= total_slots) and merges entries that
// name one machine: every local entry into one host, remote ones with the
// same name. Hosts left without ranks are dropped. `is_local` decides which
// names are the launching host.
std::vector<HostRanks> place_ranks(const std::vector<HostSlots>& hosts, int np,
                                   const std::function<bool(const std::string&)>& is_local);

}  // namespace kolorun
