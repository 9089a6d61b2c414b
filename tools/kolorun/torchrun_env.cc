#include "torchrun_env.h"

#include <string>

#include "host_address.h"
#include "rendezvous/store_socket.h"

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

int free_master_port() {
  int port = 0;
  // On every address, as torch's TCPStore server binds; closed on return.
  kolo::rdv::listen_tcp("0.0.0.0", 0, &port);
  return port;
}

std::string master_address(const std::string& iface, const std::string& peer) {
  return iface.empty() ? route_source_address(peer) : interface_address(iface);
}

}  // namespace kolorun
