// Who am I in this job? Rank, size and the rendezvous address, read from the
// variables of whichever launcher started the process, in this order:
//   kolo (kolorun):  KOLO_RANK, KOLO_SIZE, KOLO_LOCAL_RANK, KOLO_LOCAL_SIZE,
//                    KOLO_STORE_ADDR (host:port), KOLO_JOB_ID; in an elastic
//                    job KOLO_WORKER_ID instead of the ranks (elastic.h)
//   torchrun style:  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Open MPI:        OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE
//   MPICH/Hydra:     PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   Slurm:           SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_NODELIST
// The first launcher whose rank or size variable is set wins.
//
// Where the store is:
//   kolo      KOLO_STORE_ADDR; kolorun hosts the store.
//   torchrun  rank 0 hosts it at MASTER_ADDR:MASTER_PORT, or MASTER_PORT+1 under
//             real torchrun (TORCHELASTIC_RUN_ID set), whose own store holds MASTER_PORT.
//   Slurm     rank 0 hosts it on the first host of SLURM_STEP_NODELIST, on a port
//             in 20000..32767 (below Linux's ephemeral ports) hashed from the job and
//             step ids.
//   others    not known: rank 0 hosts it and publishes the address in a file
//             in /tmp (one-host jobs only).
// KOLO_STORE_ADDR=host:port overrides the address under every launcher; it is
// how the ranks of a multi-host mpirun learn where rank 0 hosts the store.
//
// The job's secret: KOLO_SECRET, the same on every rank (kolorun makes one).
// Every store and data connection proves knowledge of it (auth.h). Other
// launchers do not set it; pass one through them, e.g.
//   mpirun -x KOLO_SECRET=$(openssl rand -hex 16) -np 8 ./train
//   KOLO_SECRET=$(openssl rand -hex 16) srun --export=ALL,KOLO_SECRET -n 8 ./train
//   KOLO_SECRET=... torchrun ...   (torchrun passes its environment on)
// Without it the ranks derive a key from what they share (job id, store
// address): that keeps out ranks of other jobs, not a process that knows them.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "rendezvous/hosted_store.h"
#include "rendezvous/store.h"

namespace kolo::rdv {

using Env = std::map<std::string, std::string>;

struct Discovery {
  std::string source;  // "single", "kolo", "torchrun", "openmpi", "mpich", "slurm"
  int rank = 0;
  int size = 1;
  int local_rank = 0;   // -1 when the launcher did not say
  int local_size = 1;   // -1 when the launcher did not say
  // Where the store is. Empty host: not given by the launcher; rank 0 hosts
  // the store and the others find it through a file keyed by job_id (works
  // when all ranks share one host and /tmp, e.g. a plain mpirun).
  std::string store_host;
  int store_port = 0;
  bool rank0_hosts_store = false;  // true unless kolorun hosts it
  std::string store_port_origin;   // why this port, when kolo derived it (for errors)
  std::string job_id;              // unique per job where the launcher gives one
  std::string secret;              // KOLO_SECRET; empty: not given
  // Elastic (kolorun --min-np): KOLO_WORKER_ID instead of KOLO_RANK/KOLO_SIZE;
  // init() learns rank and size from the store (rendezvous/elastic.h).
  std::string worker_id;
};

// Pure function of the environment (tests pass a map). Throws kolo::Error
// naming the variable when something is missing or malformed, e.g. rank >= size.
Discovery discover(const Env& env);
Env current_environment();

// Expands the first host of a Slurm node list: "node[03-05,7],gpu1" -> "node03".
std::string first_slurm_host(const std::string& nodelist);

// Connects to (and on rank 0, when rank0_hosts_store, first starts) the store.
// `hosted` receives the server rank 0 starts; keep it alive for the job (it
// outlives its owner for the peers: hosted_store.h). A store on a named port
// (torchrun's MASTER_PORT) is not handed out: it stays for the life of the
// process and serves every later init() (named_port_store()).
std::unique_ptr<StoreClient> connect_store(const Discovery& d, HostedStore& hosted);
const StoreServer* named_port_store();

}  // namespace kolo::rdv
