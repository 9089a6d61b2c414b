// torchrun's variables in kolorun's ranks, so that a program written for
// torchrun runs unchanged under kolorun: torch's env:// rendezvous (gloo,
// nccl), Lightning's TorchElasticEnvironment (detected by TORCHELASTIC_RUN_ID,
// which makes Lightning start no ranks of its own), Hugging Face Accelerate.
//
// The set and its values are those of torchrun's worker environment
// (torch/distributed/elastic/agent/server/local_elastic_agent.py,
// _start_workers, in torch 1.13 and 2.15 alike); a "host" is torchrun's node
// (GROUP_RANK), ranks fill hosts in order as torchrun's do. MASTER_ADDR and
// MASTER_PORT name a port that was free on rank 0's host when the job started,
// for rank 0's TCPStore: kolorun's own store speaks kolo's protocol, not
// torch's. kolo itself never reads these in a kolorun rank: its discovery
// takes the KOLO_* variables first (rendezvous/discovery.h).
//
// Elastic workers get none of them (elastic_variables() removes inherited
// ones): torchrun restarts every worker when the membership changes, with new
// values; a kolo elastic worker stays alive and learns its new rank from the
// store, so a RANK or WORLD_SIZE fixed at its start would be wrong after the
// first change.
#pragma once

#include <string>
#include <vector>

namespace kolorun {

// Where a rank sits in the job: global, within its host, and its host's index.
struct RankPlace {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int host = 0, hosts = 1;
};

// RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK, ..., TORCHELASTIC_RUN_ID (run_id)
// as "NAME=value"; MASTER_ADDR/MASTER_PORT come from master_variables().
std::vector<std::string> torchrun_variables(const RankPlace& p, const std::string& run_id);
std::vector<std::string> master_variables(const std::string& addr, int port);

// Every name torchrun_variables() and master_variables() set, bare: the
// overrides that remove those variables (environment_with()).
std::vector<std::string> torchrun_removals();

// A TCP port nothing listens on now on this host: from KOLO_PORT_RANGE when
// that is set, else preferably below the kernel's ephemeral port range; rank
// 0's TCPStore binds it when the program starts torch.distributed. Throws
// kolo::Error naming the range when all of it is taken.
int free_master_port();

// The address the other hosts reach this one at: the address of `iface`
// (--network-interface NAME|CIDR) when given, else the source address of the
// route to `peer` (the interface kolo's ranks use too). The launcher's store
// is advertised there, and rank 0's agent gives it to torchrun's ranks as
// MASTER_ADDR. Throws kolo::net::AddressError.
std::string reachable_address(const std::string& iface, const std::string& peer);

}  // namespace kolorun
