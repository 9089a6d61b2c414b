#include "rendezvous/discovery.h"

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "core/config.h"
#include "core/error.h"
#include "rendezvous/slurm.h"

namespace kolo::rdv {

namespace {

// The variables a launcher sets, in discovery order. A launcher is chosen
// when its rank or size variable is set; the pairs (rank, size) and (local
// rank, local size) must then be complete.
struct Launcher {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;  // null: computed (Slurm)
};

constexpr Launcher kLaunchers[] = {
    {"kolo", "KOLO_RANK", "KOLO_SIZE", "KOLO_LOCAL_RANK", "KOLO_LOCAL_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};

// An empty value counts as unset, as `RANK= ./train` means.
const std::string* var(const Env& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// The first of several alternative names that is set.
const char* first_set(const Env& env, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (var(env, n)) return n;
  return nullptr;
}

int to_int(const char* name, const std::string& v) {
  // strtol would skip leading blanks; a value is the number and nothing else.
  if (std::isspace(static_cast<unsigned char>(v[0]))) fail("rendezvous: {}={} is not an integer", name, v);
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0' || x < INT_MIN || x > INT_MAX)
    fail("rendezvous: {}={} is not an integer", name, v);
  return static_cast<int>(x);
}

int int_var(const Env& env, const char* name) { return to_int(name, *var(env, name)); }

// Reads a (rank, size) style pair: both set, or neither (returns false).
bool read_pair(const Env& env, const char* a, const char* b, const char* source, int* va, int* vb) {
  const bool has_a = var(env, a) != nullptr, has_b = var(env, b) != nullptr;
  if (has_a != has_b)
    fail("rendezvous: {} is set but {} is not ({} environment)", has_a ? a : b, has_a ? b : a, source);
  if (!has_a) return false;
  *va = int_var(env, a);
  *vb = int_var(env, b);
  return true;
}

int port_number(const char* name, const std::string& text) {
  const int p = to_int(name, text);
  if (p < 1 || p > 65535) fail("rendezvous: {}={} is not a TCP port (1-65535)", name, text);
  return p;
}

// "host:port" or "[v6addr]:port".
void parse_store_addr(const std::string& v, Discovery& d) {
  const std::size_t colon = v.rfind(':');
  std::string host = colon == std::string::npos ? "" : v.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = colon == std::string::npos ? "" : v.substr(colon + 1);
  const bool digits = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
  const int p = digits ? std::stoi(port) : 0;
  if (host.empty() || p < 1 || p > 65535)
    fail("rendezvous: KOLO_STORE_ADDR={} is not host:port with a port in 1-65535", v);
  d.store_host = host;
  d.store_port = p;
}

// FNV-1a: the same value in every process of the job, unlike std::hash.
std::uint64_t stable_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

void torchrun_store(const Env& env, Discovery& d) {
  if (const std::string* id = var(env, "TORCHELASTIC_RUN_ID")) d.job_id = *id;
  const bool has_addr = var(env, "MASTER_ADDR"), has_port = var(env, "MASTER_PORT");
  if (has_addr != has_port)
    fail("rendezvous: {} is set but {} is not (torchrun environment)",
         has_addr ? "MASTER_ADDR" : "MASTER_PORT", has_addr ? "MASTER_PORT" : "MASTER_ADDR");
  if (!has_addr) return;
  int port = port_number("MASTER_PORT", *var(env, "MASTER_PORT"));
  // Under real torchrun (TORCHELASTIC_RUN_ID is set) torchrun's own TCPStore
  // already listens on MASTER_PORT, so kolo's store takes the next port.
  if (var(env, "TORCHELASTIC_RUN_ID")) {
    if (port == 65535)
      fail("rendezvous: MASTER_PORT=65535 leaves no port for kolo's store (MASTER_PORT+1 under torchrun)");
    ++port;
    d.store_port_origin =
        "MASTER_PORT+1: kolo's store under torchrun, whose own store holds MASTER_PORT; choose a "
        "MASTER_PORT whose next port is free, or call init_process_group(\"kolo\") first, which "
        "publishes a free port through torch's store";
  }
  d.store_host = *var(env, "MASTER_ADDR");
  d.store_port = port;
}

void slurm_fields(const Env& env, Discovery& d, const char** local_size_name) {
  // Local size: --ntasks-per-node when given, else this node's entry of
  // SLURM_TASKS_PER_NODE.
  if (var(env, "SLURM_NTASKS_PER_NODE")) {
    d.local_size = int_var(env, "SLURM_NTASKS_PER_NODE");
    *local_size_name = "SLURM_NTASKS_PER_NODE";
  } else if (const std::string* t = var(env, "SLURM_TASKS_PER_NODE")) {
    const int node = var(env, "SLURM_NODEID") ? int_var(env, "SLURM_NODEID") : -1;
    d.local_size = slurm_tasks_on_node(*t, node);
    if (d.local_size >= 0) *local_size_name = "SLURM_TASKS_PER_NODE";
  }

  const char* job = first_set(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (job == nullptr) return;
  const char* step_var = first_set(env, {"SLURM_STEP_ID", "SLURM_STEPID"});
  const std::string step = *var(env, job) + "." + (step_var ? *var(env, step_var) : "0");
  d.job_id = "slurm-" + step;
  // Rank 0 runs on the first node of the step (Slurm's default block
  // distribution); every rank derives the same port from the job and step
  // ids, so that two steps of one job on one node do not collide. The port
  // lies below Linux's default ephemeral range (32768-60999), from which any
  // outgoing connection on rank 0's node may hold a port (seen: "Address
  // already in use" beside a busy test suite); not read from the node's
  // settings, which every rank would have to share to derive the same port.
  if (const char* list = first_set(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"})) {
    constexpr int kFirst = 20000, kEnd = 32768;
    d.store_host = first_slurm_host(*var(env, list));
    d.store_port = kFirst + static_cast<int>(stable_hash(step) % (kEnd - kFirst));
  }
}

// has_local_rank: the launcher gave a local rank (-1 is also "not given").
void check_ranks(const Discovery& d, const Launcher& l, bool has_local_rank,
                 const char* local_size_name) {
  if (d.size < 1) fail("rendezvous: {}={} must be at least 1", l.size, d.size);
  if (d.rank < 0) fail("rendezvous: {}={} must not be negative", l.rank, d.rank);
  if (d.rank >= d.size) fail("rendezvous: {}={} is not below {}={}", l.rank, d.rank, l.size, d.size);
  if (has_local_rank && d.local_rank < 0)
    fail("rendezvous: {}={} must not be negative", l.local_rank, d.local_rank);
  if (local_size_name == nullptr) return;
  if (d.local_size < 1) fail("rendezvous: {}={} must be at least 1", local_size_name, d.local_size);
  if (d.local_size > d.size)
    fail("rendezvous: {}={} exceeds {}={}", local_size_name, d.local_size, l.size, d.size);
  if (has_local_rank && d.local_rank >= d.local_size)
    fail("rendezvous: {}={} is not below {}={}", l.local_rank, d.local_rank, local_size_name, d.local_size);
}

}  // namespace

Discovery discover(const Env& env) {
  Discovery d;
  // An elastic worker of kolorun has KOLO_WORKER_ID instead of a rank; any
  // other launcher's variables it has were inherited (srun's, when kolorun
  // runs inside a Slurm job) and do not describe this job.
  const bool elastic = var(env, "KOLO_WORKER_ID") && !var(env, "KOLO_RANK") && !var(env, "KOLO_SIZE");
  const Launcher* chosen = nullptr;
  for (const Launcher& l : kLaunchers) {
    if (elastic) break;
    if (var(env, l.rank) || var(env, l.size)) {
      chosen = &l;
      break;
    }
  }
  d.rank0_hosts_store = true;
  if (elastic) {
    // An elastic worker: its rank and size come from the store at init().
    if (!var(env, "KOLO_STORE_ADDR"))
      fail("rendezvous: KOLO_WORKER_ID is set but KOLO_STORE_ADDR is not (an elastic worker meets kolorun's store)");
    d.source = "kolo";
    d.worker_id = *var(env, "KOLO_WORKER_ID");
    d.local_rank = d.local_size = -1;
    if (const std::string* id = var(env, "KOLO_JOB_ID")) d.job_id = *id;
  } else if (chosen == nullptr) {
    d.source = "single";
  } else {
    const Launcher& l = *chosen;
    d.source = l.source;
    read_pair(env, l.rank, l.size, l.source, &d.rank, &d.size);
    const char* local_size_name = nullptr;  // the variable local_size came from
    d.local_rank = d.local_size = -1;
    bool has_local_rank;
    if (l.local_size) {
      has_local_rank = read_pair(env, l.local_rank, l.local_size, l.source, &d.local_rank, &d.local_size);
      if (has_local_rank) local_size_name = l.local_size;
    } else {
      has_local_rank = var(env, l.local_rank) != nullptr;
      if (has_local_rank) d.local_rank = int_var(env, l.local_rank);
      slurm_fields(env, d, &local_size_name);
    }
    if (d.source == "kolo") {
      if (const std::string* id = var(env, "KOLO_JOB_ID")) d.job_id = *id;
    } else if (d.source == "torchrun") {
      torchrun_store(env, d);
    } else if (d.source == "openmpi") {
      if (const char* n = first_set(env, {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"})) d.job_id = *var(env, n);
    } else if (d.source == "mpich") {
      if (const char* n = first_set(env, {"PMI_JOBID", "PMI_KVSNAME"})) d.job_id = *var(env, n);
    }
    check_ranks(d, l, has_local_rank, local_size_name);
  }
  // KOLO_STORE_ADDR names the store for any launcher. kolorun always sets it
  // (and hosts the store itself); for mpirun or MPICH across several hosts it
  // is how the ranks learn where rank 0 hosts the store, e.g.
  //   mpirun -H a,b -x KOLO_STORE_ADDR=a:29500 ./train
  if (const std::string* addr = var(env, "KOLO_STORE_ADDR")) {
    parse_store_addr(*addr, d);
    d.store_port_origin.clear();
    if (d.source == "kolo") d.rank0_hosts_store = false;
  }
  if (const std::string* secret = var(env, "KOLO_SECRET")) d.secret = *secret;
  return d;
}

Env current_environment() {
  Env env;
  for (const std::string& kv : config::environment()) {
    const std::size_t eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

}  // namespace kolo::rdv
