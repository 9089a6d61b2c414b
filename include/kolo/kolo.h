// kolo — data-parallel distributed training for C++: the public API.
//
// This header compiles as C++17 (LibTorch users) and pulls in nothing but the
// standard library. Everything below the Communicator (transports, algorithms,
// the engine thread) is private to the library.
//
//   auto comm = kolo::init();                     // rank/size from kolorun, mpirun, srun, torchrun env
//   std::vector<float> g(n);
//   comm.allreduce(g.data(), g.size(), kolo::Op::Average);          // blocking, in place
//   kolo::Work w = comm.allgather_async(in, out, n, kolo::DType::F32);  /* ... */  w.wait();
//
// Contract (as in MPI, NCCL and Gloo): every rank of a communicator issues the
// same collectives in the same order. Every rank ends with bit-identical bytes.
// Buffers handed to an *_async call must stay alive and untouched until the
// Work completes. Errors are thrown as kolo::Error and name the rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace kolo {

enum class DType : std::uint8_t { F32, F64, F16, BF16, I32, I64, U8 };

// Average is Sum divided by the number of ranks; it is defined for the
// floating types only (an integer average would silently truncate).
enum class Op : std::uint8_t { Sum, Average, Min, Max, Product };

std::size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "bf16", ...
const char* op_name(Op op);       // "sum", "average", ...
bool op_supported(DType t, Op op);

// Storage types for the 16-bit floats (IEEE binary16 and bfloat16). They are
// reduced in f32 and rounded to nearest-even once per reduction step.
struct Half { std::uint16_t bits; };
struct BFloat16 { std::uint16_t bits; };

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::U8; };

// Every failure kolo reports: the message names the rank and the problem.
// A caller's tensor shape, checked with allreduce, broadcast and reduce_scatter:
// ranks that pass the same count in different shapes (17x1311 against
// 17x23x57) get the mismatch error, as Horovod's shape check gives. Empty:
// only the count is checked. kolo.torch passes it.
using Shape = std::vector<std::int64_t>;

// Where a collective's buffers live. Host memory (the default), or memory of
// CUDA device `device`: then the collective is ordered on the caller's CUDA
// `stream` (a cudaStream_t; nullptr is the legacy default stream) as a kernel
// queued there would be. It reads its input once the work queued on `stream`
// before the call is done, and work queued on `stream` after the call waits
// for its result on the GPU, without the host blocking (where the device
// supports stream memory operations; else only after Work::wait(), which
// always works from the host). Every rank of a collective passes the same
// kind of place: a rank passing device memory where its peers pass host
// memory fails the mismatch check on every rank. kolo built without CUDA
// refuses a CUDA place with an error saying so.
struct Place {
  enum class Kind : std::uint8_t { Host, Cuda };
  Kind kind = Kind::Host;
  int device = -1;        // the CUDA device's ordinal in this process
  void* stream = nullptr;  // cudaStream_t
  // CUDA: false leaves `stream` free to go on with its next work while the
  // collective runs (communication overlapping computation, as NCCL's own
  // stream gives); only Work::wait() (or a blocking call's return) then says
  // the result is there. For fronts whose readers of a result all wait for
  // its Work first: Horovod's API, torch's process group, the gradient
  // reducer (its buckets' allreduces).
  bool stream_waits = true;
  static Place host() { return {}; }
  static Place cuda(int device, void* stream = nullptr) { return {Kind::Cuda, device, stream}; }
  bool on_host() const { return kind == Kind::Host; }
};

// True when this build of kolo has its CUDA parts (a CUDA Place works where a
// GPU is present).
bool cuda_built();

// A TCP port free on this host now — inside KOLO_PORT_RANGE when that is set,
// as every port kolo listens on — for a server a front starts itself (torch's
// TCPStore in the "kolo" backend's rendezvous, Lightning's main address),
// which binds it moments later. Throws kolo::Error naming the range when
// every port of it is taken.
int free_port();

// This host's address on the interface KOLO_IFACE names (an interface name
// or an IPv4 CIDR), the one kolo advertises for its data connections; "" when
// KOLO_IFACE is unset. For a server a front starts itself, so its peers reach
// it where they reach kolo. Throws kolo::Error listing this host's interfaces
// when KOLO_IFACE matches none of them.
std::string iface_address();

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A named operation issued while another of the same name is in flight on
// this rank (Horovod's duplicate-name error; Python: a ValueError). Only this
// rank gets it, nothing is queued, and the communicator remains usable.
class DuplicateNameError : public Error {
 public:
  using Error::Error;
};

// How every kolo message starts: "kolo rank R: " (R: this process's rank in
// its last init()), "kolo: " before init(). For libraries over kolo
// (kolo_torch) whose own errors should name the rank the same way.
std::string rank_prefix();

namespace detail {
struct WorkState;
struct Context;
}  // namespace detail

// Handle of an asynchronous collective. wait() blocks until it is done and
// rethrows its error; test() polls. Copies share the same operation.
class Work {
 public:
  Work() = default;
  void wait();
  bool test();
  bool valid() const { return state_ != nullptr; }

 private:
  friend struct detail::Context;
  explicit Work(std::shared_ptr<detail::WorkState> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::WorkState> state_;
};

class Communicator;
namespace timeline {
void start(const Communicator& comm, const std::string& path);
}
namespace elastic {
int generation(const Communicator& comm);
int latest_generation(const Communicator& comm);
}

// Communicator::split's color for a rank that joins no subgroup (MPI_UNDEFINED).
inline constexpr int kUndefined = -1;

class Communicator {
 public:
  Communicator() = default;  // invalid until assigned from kolo::init() or split()

  int rank() const;
  int size() const;
  // Ranks share a host when they can map one /dev/shm segment (same host name
  // and kernel, and each sees the other's token there): kolo decides it at
  // init(), whatever the launcher said; kolo.torch's local_rank() and
  // cross_rank() are these.
  int local_rank() const;  // index among the ranks on this host
  int local_size() const;  // ranks on this host
  int cross_rank() const;  // index of this rank's host; hosts numbered by their lowest rank
  int cross_size() const;  // hosts in the job
  // "self" (one rank), "shm" (all ranks on one host share memory), "tcp" (one
  // TCP mesh of all ranks) or "hier" (ranks on several hosts: shared memory
  // within a host, TCP between hosts; KOLO_HIERARCHICAL=0 makes it "tcp").
  std::string transport() const;
  // How collectives on CUDA memory move data: "host" (through pinned host
  // memory and the transport above), or "none" (kolo built without CUDA).
  // KOLO_GPU_TRANSPORT chooses (core/config.h).
  std::string gpu_transport() const;
  // True once a collective of this communicator has failed (a lost peer, a
  // timeout): every later call fails; form a new one (init() again).
  bool failed() const;

  // `shape` (allreduce, broadcast, reduce_scatter): see Shape above.
  // `place`: where the buffers live (Place above); host memory by default.
  // `name` (the *_async calls): a named operation (Horovod's name=), host
  // memory only. Ranks may issue named operations in any order: kolo
  // negotiates one order, as Horovod's controller does, and runs each once
  // every rank has issued it; named and unnamed calls never wait for each
  // other. A name already in flight on this rank is DuplicateNameError. Ranks
  // issuing one name with different arguments get the mismatch error for it
  // on every rank, and the communicator remains usable. Empty: unnamed,
  // matched by call order (the direct path).

  // out[i] = in_0[i] op in_1[i] op ... ; in == out is in place.
  void allreduce(const void* in, void* out, std::size_t count, DType t, Op op, const Shape& shape = {},
                 const Place& place = {});
  Work allreduce_async(const void* in, void* out, std::size_t count, DType t, Op op, const Shape& shape = {},
                       const Place& place = {},
             const std::string& name = {});

  // data from root to every rank, in place.
  void broadcast(void* data, std::size_t count, DType t, int root, const Shape& shape = {},
                 const Place& place = {});
  Work broadcast_async(void* data, std::size_t count, DType t, int root, const Shape& shape = {},
                       const Place& place = {},
             const std::string& name = {});

  // out = concat over ranks of in (count elements each); out holds size()*count.
  // In place when in == out + rank()*count.
  void allgather(const void* in, void* out, std::size_t count, DType t, const Place& place = {});
  Work allgather_async(const void* in, void* out, std::size_t count, DType t, const Place& place = {},
             const std::string& name = {});

  // Per-rank sizes: rank r contributes counts[r] elements; out holds their sum,
  // rank blocks in rank order. counts must be the same vector on every rank.
  void allgatherv(const void* in, void* out, const std::vector<std::size_t>& counts, DType t,
                  const Place& place = {});
  Work allgatherv_async(const void* in, void* out, const std::vector<std::size_t>& counts,
                        DType t, const Place& place = {},
             const std::string& name = {});

  // in holds size()*count elements; rank r receives block r of the reduction.
  // In place when out == in + rank()*count.
  void reduce_scatter(const void* in, void* out, std::size_t count, DType t, Op op, const Shape& shape = {},
                      const Place& place = {});
  Work reduce_scatter_async(const void* in, void* out, std::size_t count, DType t, Op op,
                            const Shape& shape = {}, const Place& place = {},
             const std::string& name = {});

  // in and out hold size()*count elements; block j of in goes to rank j, and
  // block j of out comes from rank j. in and out must not overlap.
  void alltoall(const void* in, void* out, std::size_t count, DType t, const Place& place = {});
  Work alltoall_async(const void* in, void* out, std::size_t count, DType t, const Place& place = {},
             const std::string& name = {});

  // Uneven blocks (MPI_Alltoallv), counts and offsets in elements: block j of
  // in (send_counts[j] elements from send_offsets[j]) goes to rank j, and
  // block j of out (recv_counts[j] elements at recv_offsets[j]) comes from
  // rank j. Empty offsets: the blocks lie packed in rank order. Zero counts
  // are fine. Rank i's send_counts[j] must equal rank j's recv_counts[i]: the
  // ranks exchange their counts inside the call, and a disagreement is an
  // error on every rank naming both ranks and counts (nothing moved; the
  // communicator stays usable). in and out must not overlap, nor out's
  // blocks each other. Host memory only for now: a CUDA place is an error.
  void alltoallv(const void* in, const std::vector<std::size_t>& send_counts,
                 const std::vector<std::size_t>& send_offsets, void* out,
                 const std::vector<std::size_t>& recv_counts, const std::vector<std::size_t>& recv_offsets,
                 DType t, const Place& place = {});
  Work alltoallv_async(const void* in, const std::vector<std::size_t>& send_counts,
                       const std::vector<std::size_t>& send_offsets, void* out,
                       const std::vector<std::size_t>& recv_counts, const std::vector<std::size_t>& recv_offsets,
                       DType t, const Place& place = {}, const std::string& name = {});
  // What each rank sends this one, from what this one sends each rank
  // (Horovod's alltoall, where only the sender gives the splits): element j
  // of the result is rank j's send_counts[this rank]. A blocking collective
  // (an alltoall of the counts), to size the output before alltoallv.
  std::vector<std::size_t> alltoallv_counts(const std::vector<std::size_t>& send_counts);

  void barrier();
  Work barrier_async();

  // Horovod's join() for named operations: while on, this rank takes part,
  // with zeros, in every named allreduce the other ranks issue (without
  // issuing it), and a named operation of another kind that the other ranks
  // issue fails on each of them. Unnamed calls are not affected.
  // Leaving is collective, as Horovod's join(): set_joined(false) returns once
  // every rank has called it, so that a named allreduce issued after it never
  // runs with a leaving rank's zeros.
  void set_joined(bool on);

  // Subgroups: a communicator over some of this one's ranks, with its own
  // engine, store key space and transport (shared memory where its ranks
  // share a host, TCP or the hierarchy otherwise, chosen as init() does).
  // Its collectives involve its ranks only: ranks outside it are never
  // blocked by them, disjoint subgroups run at the same time, and a subgroup
  // may be split again. Its errors name its ranks and their world ranks
  // ("rank 1 (world rank 3)"); its mismatch, stall and failure checks are
  // its own.
  //
  // Both calls are collective over THIS communicator: every rank calls them
  // at the same position of its collective stream (they exchange what each
  // rank asked for with one allgather here), and a rank that joins no group
  // gets an invalid Communicator (valid() == false).
  //
  // As MPI_Comm_split: the ranks passing the same color >= 0 form one
  // subgroup, ordered by key, ties by rank here; color kUndefined (any
  // negative value) joins none.
  Communicator split(int color, int key = 0);
  // The listed ranks of this communicator, in the list's order (rank i of the
  // subgroup is ranks[i]). Every rank passes the same list, including those
  // not in it, which get an invalid Communicator; a rank passing another list
  // is an error on every rank.
  Communicator subgroup(const std::vector<int>& ranks);
  // The listed ranks, in the list's order, called by THOSE RANKS ONLY (not
  // collective over this communicator: the others never take part, as
  // torch.distributed's new_group creates a group on its members alone).
  // `name` tells this group's store keys from every other group's: the
  // members pass the same name, and no other group of this communicator may
  // have had it. Members that pass different lists do not meet: their
  // rendezvous times out (KOLO_RENDEZVOUS_TIMEOUT_MS) naming the ranks missing.
  Communicator group(const std::vector<int>& ranks, const std::string& name);
  // The world rank (kolo::init()'s communicator) of each rank of this one.
  std::vector<int> world_ranks() const;

  // Typed conveniences, in place.
  template <class T>
  void allreduce(T* data, std::size_t count, Op op = Op::Sum) {
    allreduce(data, data, count, dtype_of<T>::value, op);
  }
  template <class T>
  void broadcast(T* data, std::size_t count, int root) {
    broadcast(data, count, dtype_of<T>::value, root);
  }
  // On vectors the count comes from the vector, so no buffer can be too short:
  // an output of the wrong length is an error naming both lengths, and a rank
  // whose vector differs from the others' in length fails the mismatch check
  // on every rank ("rank 1 called broadcast(f32, 9, root=0) while ...").
  template <class T>
  void allreduce(std::vector<T>& v, Op op = Op::Sum) {
    allreduce(v.data(), v.size(), op);
  }
  template <class T>
  void allreduce(const std::vector<T>& in, std::vector<T>& out, Op op = Op::Sum) {
    check_length("allreduce", "output", out.size(), in.size());
    allreduce(in.data(), out.data(), in.size(), dtype_of<T>::value, op);
  }
  template <class T>
  void broadcast(std::vector<T>& v, int root) {
    broadcast(v.data(), v.size(), root);
  }
  // out holds size() * in.size() elements.
  template <class T>
  void allgather(const std::vector<T>& in, std::vector<T>& out) {
    check_length("allgather", "output", out.size(), in.size() * scale());
    allgather(in.data(), out.data(), in.size(), dtype_of<T>::value);
  }
  // in holds size() * out.size() elements.
  template <class T>
  void reduce_scatter(const std::vector<T>& in, std::vector<T>& out, Op op = Op::Sum) {
    check_length("reduce_scatter", "input", in.size(), out.size() * scale());
    reduce_scatter(in.data(), out.data(), out.size(), dtype_of<T>::value, op);
  }
  // in and out hold size() blocks of equal length.
  template <class T>
  void alltoall(const std::vector<T>& in, std::vector<T>& out) {
    check_blocks("alltoall", "input", in.size());
    check_length("alltoall", "output", out.size(), in.size());
    alltoall(in.data(), out.data(), in.size() / scale(), dtype_of<T>::value);
  }
  // send_counts[j] elements of in (packed in rank order) go to rank j;
  // returns what arrived, rank by rank, and what each rank sent in
  // *recv_counts when given.
  template <class T>
  std::vector<T> alltoallv(const std::vector<T>& in, const std::vector<std::size_t>& send_counts,
                           std::vector<std::size_t>* recv_counts = nullptr) {
    check_sum("alltoallv", in.size(), send_counts);
    std::vector<std::size_t> got = alltoallv_counts(send_counts);
    std::size_t total = 0;
    for (std::size_t n : got) total += n;
    std::vector<T> out(total);
    alltoallv(in.data(), send_counts, {}, out.data(), got, {}, dtype_of<T>::value);
    if (recv_counts != nullptr) *recv_counts = std::move(got);
    return out;
  }

  bool valid() const { return ctx_ != nullptr; }

 private:
  std::size_t scale() const { return static_cast<std::size_t>(size()); }
  // Throw kolo::Error naming the collective, the buffer and both lengths.
  void check_length(const char* what, const char* which, std::size_t have, std::size_t need) const;
  void check_blocks(const char* what, const char* which, std::size_t have) const;
  void check_sum(const char* what, std::size_t have, const std::vector<std::size_t>& counts) const;
  // split() and subgroup(); `list`: subgroup's list (checked equal on every rank).
  Communicator split_as(int color, int key, const std::vector<int>* list);
  // The communicator of `members` (ranks of this one, in order), this rank
  // among them, under the store key space `prefix`.
  Communicator form(const std::vector<int>& members, const std::string& prefix);
  friend Communicator init();
  friend void timeline::start(const Communicator& comm, const std::string& path);
  friend int elastic::generation(const Communicator& comm);
  friend int elastic::latest_generation(const Communicator& comm);
  std::shared_ptr<detail::Context> ctx_;
};

// Discovers rank, size and the rendezvous store from the environment: kolo's
// own variables (kolorun), then torchrun's, Open MPI's, MPICH/Hydra's and
// Slurm's; connects to every peer (shared memory with ranks on this host by
// default, TCP otherwise). Collective over all ranks of the job.
Communicator init();

// Elastic jobs (kolorun --min-np/--max-np/--host-discovery-script; README
// "Elastic"): a process has no fixed rank. Each init() joins the newest
// generation of the job that lists it and forms a communicator among exactly
// its members; after a peer is lost (a collective fails on every survivor) or
// when workers are added, the process drops its communicator and calls
// init() again (Python: kolo.torch.elastic.run does all of it).
namespace elastic {
// True when kolorun started this process as an elastic worker (KOLO_WORKER_ID).
bool enabled();
// The generation `comm` was formed in; -1 outside an elastic job.
int generation(const Communicator& comm);
// The newest generation kolorun has published: greater than generation(comm)
// once workers were added or lost since `comm` formed. One round trip to the
// store, not collective (ranks may see a new generation at different times:
// agree through a broadcast). -1 outside an elastic job.
int latest_generation(const Communicator& comm);
}  // namespace elastic

// The timeline: a Chrome-trace JSON file (Perfetto, chrome://tracing) of every
// collective of every rank, with its phases and the rank each waited for.
// KOLO_TIMELINE=path (kolorun --timeline-filename) starts it in init() and it
// stops when that communicator goes. README "Timeline" shows what it holds.
namespace timeline {
// Starts recording this process's collectives (every communicator's).
// Collective over `comm`: every rank calls it; rank 0 of comm writes `path`
// at stop(), while each rank keeps a snapshot of its own events in
// `path`.rank<R>.json until then (what a killed job leaves). Errors:
// already recording; a file that cannot be written (named).
void start(const Communicator& comm, const std::string& path);
// Stops recording and writes the file: every rank hands its events to rank 0
// through the rendezvous store (collective over start()'s communicator).
// Nothing when not recording.
void stop();
bool on();
// The clock of span(): std::chrono::steady_clock (CLOCK_MONOTONIC), in ns.
std::int64_t now_ns();
// The caller's name for the next collective this thread issues (Horovod's
// name=), shown in the trace. Nothing when off.
void name_next(const std::string& name);
// A span of the caller's own (a gradient bucket, backward, an optimizer step)
// on this thread's track; `args_json`: empty or JSON object members
// ("\"bytes\": 4096"). Nothing when off.
void span(const char* category, const std::string& name, std::int64_t begin_ns, std::int64_t end_ns,
          const std::string& args_json = {});
}  // namespace timeline

}  // namespace kolo
