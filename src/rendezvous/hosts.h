// Which ranks share a host, decided at init() through the store.
//
// "Host" here means what the shared-memory transport needs: ranks that can
// map one segment in /dev/shm. The hostname alone cannot decide it: network
// namespaces and containers on one machine share the boot id and often the
// hostname, yet may have separate /dev/shm mounts (the emulated hosts of the
// multi-host tests: distinct hostnames, distinct /dev/shm, one boot id, one
// filesystem); and two machines may carry the same hostname. So two ranks
// share a host when
//   - their host names are equal (KOLO_HOSTNAME, else gethostname(): the
//     name messages use, and the override tests use to split the ranks of
//     one machine into several "hosts"), and
//   - their boot ids are equal (one kernel), and
//   - each can see the other's token: a file every rank creates in /dev/shm
//     under a random name (shm_open). That proves the shared /dev/shm itself,
//     whatever the namespaces, containers or mounts.
// The network namespace is deliberately not part of it: ranks that share
// /dev/shm can use shared memory whatever their network. Tokens are removed
// once every rank has looked (named kolo-<job>-host-*, so kolorun's sweep of
// kolo-<job>-* removes them after a crash too).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace kolo::rdv {

struct HostMap {
  std::vector<int> host_of;                // host index of each rank
  std::vector<std::vector<int>> ranks;     // ranks of each host, ascending; hosts ordered by lowest rank
  std::vector<std::string> names;          // name of each host
  std::vector<std::string> routes;         // each rank's local address of its store connection (nic.h)
  int machine_ranks = 0;                   // ranks on this rank's machine (same boot id): they share its cores

  int hosts() const { return static_cast<int>(ranks.size()); }
  const std::string& host_name_of(int rank) const { return names[host_of[rank]]; }
};

// Every rank calls it with the same prefix; `route` is this rank's store
// connection's local address.
HostMap map_hosts(StoreClient& store, const std::string& prefix, const std::string& job_id, int rank,
                  int size, const std::string& route);

// This process's host name: KOLO_HOSTNAME, else gethostname().
std::string host_name();

// Waits until every rank has set <name>/<rank>; the error lists the ranks
// that never arrived (not just store keys).
void wait_for_ranks(StoreClient& store, const std::string& name, int size, Millis timeout);
// Sets <name>/<rank> and waits for every rank's.
void store_barrier(StoreClient& store, const std::string& name, int rank, int size);
// Sets <name>/<rank> and waits, at most `limit`, for every rank's: true when
// all came. False past `limit`, at once when any rank has set <abandon>/<q>
// (a rank that posted a failure may never come), or when the store is gone.
// Never throws: a destructor's wait (transport/gpu.h's Farewell).
bool store_barrier_unless(StoreClient& store, const std::string& name, const std::string& abandon, int rank,
                          int size, Millis limit);

}  // namespace kolo::rdv
