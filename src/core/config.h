// Every tunable of kolo, declared once: its environment variable, default and
// meaning (NCCL's style). Values are read from the environment on first use.
// The one place kolo's C++ reads the environment (tests/layout checks it):
// the launchers' variables and what kolorun passes on are read here too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kolo::config {

// Reads an integer variable; a value that does not parse is an error naming it.
std::int64_t env_int(const char* name, std::int64_t def);
std::string env_str(const char* name, const std::string& def);
// Whether a variable is set to something (not unset, not empty).
bool is_set(const char* name);

// --- the environment as a whole ---------------------------------------------
// A variable as it is, "" included; nullopt where unset (launchers'
// variables, PATH, kolorun's -x NAME).
std::optional<std::string> env_var(const std::string& name);
// Every NAME=value of this process's environment: what discovery reads the
// launcher's variables from, what kolorun passes on to ranks and agents.
std::vector<std::string> environment();
// KOLO_WORKER_ID: kolorun's name for an elastic worker (rendezvous/elastic.h).
inline std::string worker_id() { return env_var("KOLO_WORKER_ID").value_or(""); }

// --- transport -------------------------------------------------------------
// "auto" (shared memory on one host; across hosts hierarchical, see KOLO_HIERARCHICAL), "shm" or "tcp".
inline std::string transport() { return env_str("KOLO_TRANSPORT", "auto"); }
// How collectives on CUDA memory move data (transport/gpu.h): "host" (device
// memory staged through pinned host memory and the transport above), "ipc"
// (ranks of one host read each other's device memory through CUDA IPC),
// "nccl" (NCCL, loaded at run time, for ranks that each own a GPU; where it
// cannot be loaded the host plane serves, and says why), or "auto": host,
// until the ipc and nccl planes have been seen working on a GPU.
inline std::string gpu_transport() { return env_str("KOLO_GPU_TRANSPORT", "auto"); }
// The NCCL library the nccl plane loads (dlopen): a file name the loader
// searches for, or a path. libnccl.so.2 is also the one a framework (torch)
// already loaded into the process.
inline std::string nccl_library() { return env_str("KOLO_NCCL_LIBRARY", "libnccl.so.2"); }
// 0: a collective on CUDA memory never makes the caller's stream wait for it
// on the GPU (cuStreamWaitValue32): its result is ready after Work::wait() or
// the blocking call's return, as where the driver offers no stream memory
// operations. A way out should a driver's stream waits misbehave.
inline bool gpu_stream_wait() { return env_int("KOLO_GPU_STREAM_WAIT", 1) != 0; }
// Bytes per part of the host plane's pipeline (transport/staged_parts.h):
// allreduces and broadcasts larger than this move in parts, the copies
// between device and host of one overlapping the collective on another.
inline std::int64_t gpu_part_bytes() { return env_int("KOLO_GPU_PART_BYTES", 4 << 20); }
// Bytes of device memory each rank lends its peers in the ipc plane: a
// collective moves through it in rounds of a third of it per rank.
inline std::int64_t gpu_ipc_bytes() { return env_int("KOLO_GPU_IPC_BYTES", 32 << 20); }
// Allreduces of at least this many bytes on 3 or more ranks are reduce-scatter
// then allgather in the ipc plane (each rank reduces a piece); smaller ones,
// and every one on 2 ranks (where sharding moves as many bytes), are one
// kernel per rank over all the inputs. A guess until measured on a GPU.
inline std::int64_t gpu_ipc_sharded_bytes() { return env_int("KOLO_GPU_IPC_SHARDED_BYTES", 8 << 20); }
// Allreduces of at least this many bytes in the ipc plane read the peers'
// buffers in place (mapped through CUDA IPC) instead of passing through its
// own; 0: never. Below it the fewer synchronisations of the inbox's path
// cost less than the copies they save. A guess until measured on a GPU.
inline std::int64_t gpu_ipc_direct_bytes() { return env_int("KOLO_GPU_IPC_DIRECT_BYTES", 16 << 20); }
// Bytes per rank and pipeline stage of the shared-memory collectives: big
// enough to amortise one flag synchronisation, small enough to stay in cache.
inline std::int64_t shm_chunk_bytes() { return env_int("KOLO_SHM_CHUNK", 256 << 10); }
// Busy-wait iterations (a pause each, ~25 ns on the dev VM) before a rank
// waiting for a shared-memory peer sleeps (yielding its core first only where
// the machine's ranks outnumber its cores); < 0: chosen by the transport from
// how many ranks share the cores and whether the collective overlaps its
// caller's work (transport/shm_group.cc).
inline std::int64_t shm_spins() { return env_int("KOLO_SHM_SPINS", -1); }
// Socket send/receive buffer size requested for data connections.
inline std::int64_t tcp_buffer_bytes() { return env_int("KOLO_TCP_BUFFER", 4 << 20); }
// Bytes per pipeline segment of the TCP ring algorithms.
inline std::int64_t ring_segment_bytes() { return env_int("KOLO_RING_SEGMENT", 1 << 20); }
// Ranks on several hosts: 1 = hierarchical collectives (shared memory within
// a host, TCP between hosts), 0 = one flat TCP mesh of all ranks.
inline bool hierarchical() { return env_int("KOLO_HIERARCHICAL", 1) != 0; }

// Bytes per pipeline segment of the hierarchical allreduce: shared memory
// works on one segment while the link carries another.
inline std::int64_t hier_segment_bytes() { return env_int("KOLO_HIER_SEGMENT", 4 << 20); }

// --- network ---------------------------------------------------------------
// The address a rank advertises for its data connections: an interface name
// ("eth1") or a CIDR ("10.0.0.0/24") picks it; empty: the interface that
// routes to the store's host (net/nic.h). Also where the "kolo"
// backend announces its store under torch's rendezvous (kolo.h iface_address).
inline std::string iface() { return env_str("KOLO_IFACE", ""); }
// kolorun's remote shell for -H/--hostfile when --rsh is not given (a command
// line: "ssh -i key", a test's fake).
inline std::string rsh() { return env_str("KOLO_RSH", "ssh"); }
// "lo-hi": the only ports kolo listens on (data connections, and the store
// rank 0 hosts where kolo chooses the port) and the ones its Python fronts
// choose for servers they start (free_port: the "kolo" backend's stores,
// Lightning's main address); empty: any port.
struct PortRange {
  int lo = 0, hi = 0;  // 0, 0: any
};
PortRange port_range();
// Names this process's host in messages and splits ranks into hosts in tests
// ("emulated" hosts on one machine); empty: gethostname().
inline std::string hostname_override() { return env_str("KOLO_HOSTNAME", ""); }

// --- algorithm selection ---------------------------------------------------
// Allreduce messages up to this many bytes use the latency-optimal algorithm.
inline std::int64_t allreduce_small_bytes() { return env_int("KOLO_ALLREDUCE_SMALL", 64 << 10); }
// Force one allreduce algorithm: "auto", "oneshot", or the large one of the transport: "chunked"
// (shm), "ring" (tcp), "sharded" (ranks on several hosts, hierarchical).
inline std::string allreduce_algo() { return env_str("KOLO_ALLREDUCE_ALGO", "auto"); }

// --- failure handling ------------------------------------------------------
// Longest a rank waits for a peer inside a collective before failing (ms); 0: no limit.
inline std::int64_t timeout_ms() { return env_int("KOLO_TIMEOUT_MS", 300000); }
// A rank waiting this long inside a collective logs which ranks it waits for (ms).
inline std::int64_t stall_warn_ms() { return env_int("KOLO_STALL_WARN_MS", 60000); }
// A peer whose host stops answering (no FIN, e.g. a dead machine) is declared
// lost after this long: TCP keep-alive and TCP_USER_TIMEOUT on data sockets (ms).
inline std::int64_t peer_timeout_ms() { return env_int("KOLO_PEER_TIMEOUT_MS", 10000); }
// Longest init() waits for all ranks to arrive at the rendezvous (ms).
inline std::int64_t rendezvous_timeout_ms() { return env_int("KOLO_RENDEZVOUS_TIMEOUT_MS", 120000); }
// How long a rank that hosts the rendezvous store for its peers (rank 0
// under mpirun, torchrun-style variables and Slurm; kolorun hosts its own)
// waits at exit for those still connected to it (ms): a peer may still be
// inside init() or reporting a failure (rendezvous/hosted_store.h). Under
// these launchers the job ends when its last rank does, so the wait costs no
// wall time while peers run. The default, the rendezvous timeout, lets a peer
// that waits for this rank in a rendezvous end with its own timeout error
// rather than a lost store. 0: stop the store at exit at once.
inline std::int64_t store_linger_ms() { return env_int("KOLO_STORE_LINGER_MS", rendezvous_timeout_ms()); }
// Elastic jobs (kolorun --min-np): longest init() waits for kolorun to list
// this worker in a new generation (ms); kolorun --elastic-timeout sets it.
inline std::int64_t elastic_timeout_ms() { return env_int("KOLO_ELASTIC_TIMEOUT_MS", 600000); }

// Compare every collective's fingerprint across ranks (mismatch detection).
// Always on; 0 exists only to measure what the check costs (bench/results).
inline bool verify_calls() { return env_int("KOLO_VERIFY_CALLS", 1) != 0; }

// --- named operations (comm/named_channel.h) -----------------------------
// Horovod's cycle time: how long a fresh named operation is held before it is
// announced unless its caller waits first, and the longest pause between
// negotiation rounds while something is pending on some rank (µs).
inline std::int64_t named_cycle_us() { return env_int("KOLO_NAMED_CYCLE_US", 1000); }
// Names the response cache keeps (one bit each in every round); older ones
// pending nowhere are forgotten beyond it (Horovod's HOROVOD_CACHE_CAPACITY).
inline std::int64_t named_cache_capacity() { return env_int("KOLO_NAMED_CACHE", 1024); }

// --- the gradient reducer (include/kolo/reducer.h) ------------------------
// Bytes of a fused gradient bucket (Horovod's fusion buffer; DDP's
// bucket_cap_mb): KOLO_FUSION_THRESHOLD, else Horovod's
// HOROVOD_FUSION_THRESHOLD; -1 (unset): each front's default (25 MiB in
// torch, whose buckets overlap backward; 64 MiB in TensorFlow, whose
// gradients arrive at once). 0: no fusion, a bucket per gradient.
// HOROVOD_CYCLE_TIME has no meaning for the reducer, which issues a bucket
// the moment it is full; for named operations it is KOLO_NAMED_CYCLE_US.
inline std::int64_t fusion_threshold() { return env_int("KOLO_FUSION_THRESHOLD", env_int("HOROVOD_FUSION_THRESHOLD", -1)); }

// Self-tuning of the reducer's bucket cap (src/reducer/autotune.h):
// KOLO_AUTOTUNE=1, else Horovod's HOROVOD_AUTOTUNE=1. Not with an explicit
// KOLO_FUSION_THRESHOLD, which stays fixed (as Horovod keeps a knob the user
// set). Every rank times the same steps and joins the same agreement.
inline bool autotune() { return env_int("KOLO_AUTOTUNE", env_int("HOROVOD_AUTOTUNE", 0)) != 0; }
// Steps run before the first candidate is timed (start-up effects: first
// allocations, caches); after each change of layout one more step is not timed.
inline std::int64_t autotune_warmup_steps() { return env_int("KOLO_AUTOTUNE_WARMUP_STEPS", 3); }
// Timed steps per candidate bucket cap; its score is their median.
inline std::int64_t autotune_steps() { return env_int("KOLO_AUTOTUNE_STEPS", 5); }
// The CSV that rank 0 writes (one line per candidate tried, then the choice):
// KOLO_AUTOTUNE_LOG, else HOROVOD_AUTOTUNE_LOG; empty: none.
inline std::string autotune_log() { return env_str("KOLO_AUTOTUNE_LOG", env_str("HOROVOD_AUTOTUNE_LOG", "")); }

// --- settings every rank of a job must share --------------------------------
// Each tunable above whose disagreement between ranks breaks a collective (a
// different transport, algorithm or chunking means mismatched messages: a hang
// or a wrong result), as NAME and effective value (the default where unset).
// init() compares them across ranks (rendezvous/settings_check.h).
struct Setting {
  const char* name;
  std::string value;
};
std::vector<Setting> job_wide_settings();

// --- diagnostics -----------------------------------------------------------
// What kolo logs to stderr: "error", "warn", "info" (e.g. each rank's NIC choice) or "debug".
inline std::string log_level() { return env_str("KOLO_LOG", "warn"); }
// The timeline file (Chrome trace) that init() starts recording to; empty: none.
inline std::string timeline_path() { return env_str("KOLO_TIMELINE", ""); }
// How often each rank rewrites the snapshot of its own events (ms); the
// writer waits longer when a rewrite takes more than 2 % of that.
inline std::int64_t timeline_flush_ms() { return env_int("KOLO_TIMELINE_FLUSH_MS", 1000); }
// How long rank 0 waits at the end for every rank's events (ms).
inline std::int64_t timeline_merge_timeout_ms() { return env_int("KOLO_TIMELINE_MERGE_TIMEOUT_MS", 60000); }

// --- testing ---------------------------------------------------------------
// Every wait of this process for other ranks' keys in the rendezvous store
// (StoreClient::wait: init()'s barriers) first sleeps this long (ms): tests
// slow one rank down inside init(), between its last requests, as a loaded
// host does by chance (tests/failures/early_exit_test.sh). 0: no delay.
inline std::int64_t test_store_wait_delay_ms() { return env_int("KOLO_TEST_STORE_WAIT_DELAY_MS", 0); }

}  // namespace kolo::config
