#include "torchrun_env.h"

#include <fstream>
#include <random>
#include <string>

#include "core/config.h"
#include "core/error.h"
#include "net/address.h"
#include "net/socket.h"

namespace kolorun {

std::vector<std::string> torchrun_variables(const RankPlace& p, const std::string& run_id) {
  auto n = [](int v) { return std::to_string(v); };
  return {
      "RANK=" + n(p.rank),
      "LOCAL_RANK=" + n(p.local_rank),
      "WORLD_SIZE=" + n(p.size),
      "LOCAL_WORLD_SIZE=" + n(p.local_size),
      "GROUP_RANK=" + n(p.host),
      "GROUP_WORLD_SIZE=" + n(p.hosts),
      // One role, as torchrun without --role: its ranks are the job's.
      "ROLE_RANK=" + n(p.rank),
      "ROLE_WORLD_SIZE=" + n(p.size),
      "ROLE_NAME=default",
      "TORCHELASTIC_RUN_ID=" + run_id,
      "TORCHELASTIC_RESTART_COUNT=0",
      "TORCHELASTIC_MAX_RESTARTS=0",
      // As torchrun writes it. An outer torchrun's "True" would make torch's
      // env:// a client of a store that nobody hosts in this job.
      "TORCHELASTIC_USE_AGENT_STORE=False",
  };
}

std::vector<std::string> master_variables(const std::string& addr, int port) {
  return {"MASTER_ADDR=" + addr, "MASTER_PORT=" + std::to_string(port)};
}

std::vector<std::string> torchrun_removals() {
  std::vector<std::string> names;
  for (const auto& set : {torchrun_variables({}, ""), master_variables("", 0)})
    for (const auto& kv : set) names.push_back(kv.substr(0, kv.find('=')));
  return names;
}

namespace {

// The first port of the kernel's ephemeral range, from which every outgoing
// connection on this host takes its local port; 0 when it cannot be read.
int ephemeral_low() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return f >> low ? low : 0;
}

}  // namespace

int free_master_port() {
  // Probed on every address, as torch's TCPStore server binds; closed on return.
  if (kolo::config::port_range().lo == 0) {
    // Below the ephemeral range when there is room (20000 up, as kolo's
    // Slurm store port): rank 0 binds the port seconds later (Python's
    // imports), and meanwhile any connection on this host could take a port
    // of the ephemeral range, never one below it.
    constexpr int kFirst = 20000;
    const int end = ephemeral_low();
    std::random_device rd;
    for (int tries = 0; tries < 64 && end > kFirst; ++tries) {
      const int p = kFirst + static_cast<int>(rd() % static_cast<unsigned>(end - kFirst));
      try {
        return kolo::net::listen_tcp("0.0.0.0", p, 0, "rendezvous").port;
      } catch (const kolo::Error&) {
        // in use: another one
      }
    }
  }
  return kolo::net::listen_tcp("0.0.0.0", 0, 0, "rendezvous").port;  // KOLO_PORT_RANGE's, or any
}

std::string reachable_address(const std::string& iface, const std::string& peer) {
  return iface.empty() ? kolo::net::route_source(peer)
                       : kolo::net::interface_address_for("--network-interface " + iface, iface, "this host");
}

}  // namespace kolorun
