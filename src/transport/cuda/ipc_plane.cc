// The "ipc" data plane for CUDA memory: ranks of one host — sharing a GPU or
// each with its own — read each other's device memory through CUDA IPC, and
// kolo's own kernel reduces it (kernels/reduce_cuda.h).
//
// Each rank lends its peers one device buffer, its inbox (KOLO_GPU_IPC_BYTES,
// the same on every rank), allocated at the first collective's issue and
// mapped by every peer (cudaIpcOpenMemHandle) at its run, the handles
// exchanged through the host transport inside that collective. The inbox is
// cut into three sections, used in turn, one per round; a collective moves
// in rounds of at most one section per rank. A round:
//   1. each rank copies its part of the round into its section (kolo's
//      stream, after the caller's input event), and waits for its stream;
//   2. host barrier: every section of this round is filled, and everything
//      every rank queued before it has run;
//   3. each rank reads its peers' sections (queued, not waited for): the
//      reduction kernel over all of them in rank order (allreduce,
//      reduce_scatter: so every rank gets the same bits), or copies from them
//      (broadcast, allgather, alltoall) into its output.
// A section is refilled three rounds after it was filled: the barrier of the
// round in between has seen every rank's reads of it done. Large allreduces
// from 3 ranks on (KOLO_GPU_IPC_SHARDED_BYTES) are reduce-scatter then
// allgather, pipelined across rounds: in round j each rank reduces its piece
// of chunk j in place in its own section and copies every rank's reduced
// piece of chunk j-1 into its output — each rank reads the data once instead
// of every rank reading all of it.
// Allreduces of at least KOLO_GPU_IPC_DIRECT_BYTES skip the inbox: every rank
// maps its peers' own input and output buffers (their CUDA IPC handles
// exchanged at each such collective, the mappings kept open between them,
// transport/mapping_cache.h), reduces its piece of all the inputs into its
// output, and after a barrier copies the peers' reduced pieces from their
// outputs into its own. On 2 ranks sharing a GPU that moves half the bytes of
// the inbox's path (no copy in; each input read once). Where any rank's buffer
// cannot be exported (a memory pool's, torch's expandable segments), or any
// rank's caller's stream waits on the collective (allreduce_direct), every
// rank takes the inbox.
// No kernel ever waits on another rank (the host barriers do): a rank that
// dies leaves no kernel spinning, and its peers fail in the barrier, naming it.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/ranges.h"
#include "kernels/reduce.h"
#include "kernels/reduce_cuda.h"
#include "transport/cuda/caller_stream.h"
#include "transport/cuda/planes.h"
#include "transport/cuda/runtime.h"
#include "transport/mapping_cache.h"

namespace kolo::gpu {

namespace {

// What a rank tells its peers about its inbox.
struct Card {
  cudaIpcMemHandle_t handle;
  std::int32_t device;
  std::int32_t pid;
  std::uint64_t bytes;
};

// Where a buffer lies in an allocation its peers can map.
struct Export {
  HandleBytes handle;
  std::uint64_t id;      // the allocation's (cuda::Allocation::id)
  std::uint64_t offset;  // of the buffer in it
};
static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(HandleBytes));

// What a rank tells its peers about the buffers of a direct allreduce.
struct DirectCard {
  std::uint64_t ok;  // 1: both exported
  Export in, out;
};

// Peers' allocations kept mapped per rank: a training step's buffers (the
// caching allocator's segments, kolo's fusion buffers) are few.
constexpr std::size_t kMappingsPerRank = 32;

constexpr int kSections = 3;
// The reduction kernel loads a vector of each input at once where every
// pointer is aligned to it (kernels/reduce_cuda.h): the blocks and pieces a
// rank reduces start on such boundaries where they can.
constexpr std::size_t kVector = kernels::cuda::kVectorBytes;

// Where piece q of `n` elements of `es` bytes starts, pieces cut on vector
// boundaries (the last one takes the rest): piece_begin in vectors.
std::size_t piece_edge(std::size_t n, std::size_t es, int parts, int q) {
  const std::size_t g = kVector / es;
  return q == parts ? n : piece_begin(n / g, parts, q) * g;
}

// A peer's allocation mapped into this process; on failure `fail_with(error)`
// (which throws) after the runtime's last error is cleared.
template <class Fail>
char* open_mapping(const cudaIpcMemHandle_t& handle, Fail fail_with) {
  void* p = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail_with(e);
  }
  return static_cast<char*>(p);
}

class IpcPlane : public Plane {
 public:
  IpcPlane(int size, Farewell farewell)
      : size_(size),
        farewell_(std::move(farewell)),
        capacity_(static_cast<std::size_t>(config::gpu_ipc_bytes())),
        section_(capacity_ / kSections / kAlign * kAlign),
        sharded_bytes_(static_cast<std::size_t>(std::max<std::int64_t>(config::gpu_ipc_sharded_bytes(), 0))),
        direct_bytes_(static_cast<std::size_t>(std::max<std::int64_t>(config::gpu_ipc_direct_bytes(), 0))),
        mapped_(kMappingsPerRank, [](char* base) { (void)cudaIpcCloseMemHandle(base); }) {
    if (config::gpu_ipc_bytes() < 4096 * kSections)
      fail("KOLO_GPU_IPC_BYTES={} is too small for the ipc plane (at least {})", config::gpu_ipc_bytes(),
           4096 * kSections);
  }
  ~IpcPlane() override;
  PlaneCode code() const override { return PlaneCode::Ipc; }
  std::shared_ptr<Ticket> issue(const Call& call, const Place& place) override;
  void run(Ticket& ticket, const Call& c, const HostLink& host) override;

 private:
  void open_peers(const StreamTicket& t, const HostLink& host);
  // Rank r's section of the round `ahead` rounds from now, as this process maps it.
  char* section(int r, std::size_t ahead = 0) const {
    return peers_[r] + (round_ + ahead) % kSections * section_;
  }
  void sync(const StreamTicket& t, cudaStream_t s) { cuda::synchronize(s, t.what, t.device); }
  void copy(const StreamTicket& t, void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
    if (bytes > 0) KOLO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), t.what, t.device);
  }
  // Copies `rows` rows of `width` bytes, from src every src_pitch bytes to dst every dst_pitch bytes:
  // one 2D copy, or a copy per row where a pitch passes the device's limit (2^31 - 1 bytes on
  // today's GPUs: reduce_scatter's and alltoall's blocks of 2 GiB and more).
  void copy_rows(const StreamTicket& t, void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                 std::size_t width, std::size_t rows, cudaStream_t s) {
    if (width == 0 || rows == 0) return;
    if (max_pitch_ == 0) {
      int v = 0;
      KOLO_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxPitch, t.device), t.what, t.device);
      max_pitch_ = static_cast<std::size_t>(v);
    }
    if (std::max(dst_pitch, src_pitch) <= max_pitch_) {
      KOLO_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault, s), t.what,
                      t.device);
      return;
    }
    for (std::size_t r = 0; r < rows; ++r)
      copy(t, static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, width, s);
  }
  // out = every rank's section (`ahead` rounds from now) from byte `offset` on, reduced in rank order.
  void reduce(const StreamTicket& t, const Call& c, std::size_t ahead, std::size_t offset, void* out,
              std::size_t count, cudaStream_t s);
  // out = the inputs reduced in rank order (the op's divisor applied).
  void reduce(const StreamTicket& t, const Call& c, const kernels::cuda::Inputs& inputs, void* out,
              std::size_t count, cudaStream_t s);

  void allreduce(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  void allreduce_sharded(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  bool allreduce_direct(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  // Where `p` lies in an allocation legacy CUDA IPC can export; false where it cannot.
  bool describe(const void* p, Export* e);
  // Rank `rank`'s buffer `e` as this process maps it.
  const char* peer_buffer(const StreamTicket& t, int rank, const Export& e);
  void broadcast(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  void allgatherv(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  void reduce_scatter(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  void alltoall(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  template <class Stage, class Take>
  void rounds(const StreamTicket& t, const HostLink& host, cudaStream_t s, std::size_t total, std::size_t per,
              Stage stage, Take take);
  void stage_blocks(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s, std::size_t per,
                    std::size_t at, std::size_t n);
  // Elements of each rank's block in a section (reduce_scatter, alltoall), a
  // whole number of 16-byte vectors (a section holds at least 4096 bytes, so
  // 16 ranks' blocks are at least 16 bytes).
  std::size_t block_elements(std::size_t es) const { return section_ / size_ / kVector * kVector / es; }

  CallerStreams streams_;
  const int size_;
  const Farewell farewell_;          // before the inbox is freed (gpu.h)
  const std::size_t capacity_;       // bytes of every rank's inbox
  const std::size_t section_;        // bytes of one of its sections
  const std::size_t sharded_bytes_;  // allreduces from this size on (3+ ranks) are sharded
  const std::size_t direct_bytes_;   // allreduces from this size on read the peers' buffers (0: never)
  MappingCache mapped_;              // peers' buffers of direct allreduces
  std::unordered_map<std::uint64_t, HandleBytes> exported_;  // this rank's, by allocation id
  int device_ = -1;                  // this rank's device: the first collective's
  std::size_t max_pitch_ = 0;        // its cudaDevAttrMaxPitch (0: not asked yet)
  char* inbox_ = nullptr;
  bool handed_out_ = false;   // the inbox's handle went to the peers (the first collective's run)
  std::vector<char*> peers_;  // every rank's inbox as this process maps it (its own: inbox_)
  std::uint64_t round_ = 0;   // rounds moved so far: the next one fills section round_ % kSections
};

// A peer's last reads of this rank's inbox may still be queued when this
// rank is done (its last collective ended at its own barrier): the inbox is
// freed only once every rank has said it unmapped it — else it stays
// allocated until the process exits. The peers' buffers of direct allreduces
// are unmapped here too; a caller that frees such a buffer earlier relies on
// the driver keeping it for the mapping (as CUDA IPC's users do).
IpcPlane::~IpcPlane() {
  streams_.release_all();
  streams_.drain();  // a failed collective may have left reads of the mappings queued
  if (device_ < 0) return;  // never issued a collective: nothing allocated or mapped
  cuda::quietly_on(device_, [this] {
    mapped_.clear();
    for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
      if (peers_[r] != nullptr && peers_[r] != inbox_) (void)cudaIpcCloseMemHandle(peers_[r]);
    if (!handed_out_ || (farewell_ && farewell_()))
      (void)cudaFree(inbox_);
    else
      log(LogLevel::Info, "cuda:{}: the ipc plane's inbox ({} bytes) stays allocated until the process exits: not "
          "every rank said it had unmapped it (within KOLO_PEER_TIMEOUT_MS)", device_, capacity_);
  });
}

std::shared_ptr<Ticket> IpcPlane::issue(const Call& call, const Place& place) {
  if (device_ >= 0 && place.device != device_)
    fail("{}: the ipc plane serves one CUDA device per rank: this rank's collectives so far used cuda:{}, "
         "this one cuda:{} (KOLO_GPU_TRANSPORT=host serves any)",
         call.what, device_, place.device);
  const bool first = inbox_ == nullptr;  // its run maps the peers' inboxes
  if (first) {
    cuda::DeviceScope on(place.device, call.what);
    void* p = nullptr;
    KOLO_CUDA_CHECK(cudaMalloc(&p, capacity_), call.what, place.device);
    inbox_ = static_cast<char*>(p);
    device_ = place.device;
  }
  return streams_.issue(call.what, place, first);
}

void IpcPlane::open_peers(const StreamTicket& t, const HostLink& host) {
  Card mine{};
  KOLO_CUDA_CHECK(cudaIpcGetMemHandle(&mine.handle, inbox_), t.what, t.device);
  mine.device = device_;
  mine.pid = static_cast<std::int32_t>(::getpid());
  mine.bytes = capacity_;
  std::vector<Card> all(size_);
  handed_out_ = true;  // peers may map it from here on
  host.allgather(&mine, all.data(), sizeof(Card));
  peers_.assign(size_, nullptr);
  for (int r = 0; r < size_; ++r) {
    if (r == host.rank) {
      peers_[r] = inbox_;
      continue;
    }
    if (all[r].bytes != capacity_)
      fail("{}: rank {} lends {} bytes of device memory to the ipc plane, this rank {} (KOLO_GPU_IPC_BYTES differs)",
           t.what, r, all[r].bytes, capacity_);
    peers_[r] = open_mapping(all[r].handle, [&](cudaError_t e) {
      fail("{} on cuda:{}: cannot map the device memory of rank {} (pid {}, cuda:{} in its process) through CUDA "
           "IPC: {} ({}); KOLO_GPU_TRANSPORT=host works without it",
           t.what, t.device, r, all[r].pid, all[r].device, cudaGetErrorString(e), cudaGetErrorName(e));
    });
  }
}

void IpcPlane::reduce(const StreamTicket& t, const Call& c, std::size_t ahead, std::size_t offset, void* out,
                      std::size_t count, cudaStream_t s) {
  kernels::cuda::Inputs inputs;
  inputs.n = size_;
  for (int r = 0; r < size_; ++r) inputs.in[r] = section(r, ahead) + offset;
  reduce(t, c, inputs, out, count, s);
}

void IpcPlane::reduce(const StreamTicket& t, const Call& c, const kernels::cuda::Inputs& inputs, void* out,
                      std::size_t count, cudaStream_t s) {
  KOLO_CUDA_CHECK(kernels::cuda::reduce(c.fp.dtype, kernels::kernel_op(c.fp.op), inputs, out, count,
                                        kernels::kernel_divisor(c.fp.op, size_), s),
                  t.what, t.device);
}

void IpcPlane::run(Ticket& ticket, const Call& c, const HostLink& host) {
  auto& t = static_cast<StreamTicket&>(ticket);
  const cudaStream_t s = streams_.start(t);
  if (peers_.empty()) open_peers(t, host);
  KOLO_CUDA_CHECK(cudaStreamWaitEvent(s, t.input_ready, 0), t.what, t.device);
  // Nothing to move: one barrier still, the collective's synchronisation
  // (where the ranks' fingerprints are compared).
  if (c.in_bytes == 0 && c.out_bytes == 0) {
    host.barrier();
    t.release();
    return;
  }
  switch (c.fp.kind) {
    case Kind::Allreduce:
      if (direct_bytes_ > 0 && c.in_bytes >= direct_bytes_ && allreduce_direct(t, c, host, s)) break;
      if (size_ >= 3 && c.in_bytes >= std::max<std::size_t>(sharded_bytes_, 1))
        allreduce_sharded(t, c, host, s);
      else
        allreduce(t, c, host, s);
      break;
    case Kind::Broadcast: broadcast(t, c, host, s); break;
    case Kind::Allgather:
    case Kind::Allgatherv: allgatherv(t, c, host, s); break;
    case Kind::ReduceScatter: reduce_scatter(t, c, host, s); break;
    case Kind::Alltoall: alltoall(t, c, host, s); break;
    case Kind::Alltoallv: fail("{}: not on CUDA memory (Communicator::alltoallv refuses it first)", t.what);
    case Kind::Barrier: host.barrier(); break;
  }
  sync(t, s);
  t.release();
}

// Every collective here moves its data in rounds of at most `per` elements
// of `total`: stage(at, n) fills this rank's section of the round, every rank
// waits until every section is filled (its stream, then the host barrier),
// and take(at, n) queues the reads of the peers' sections.
template <class Stage, class Take>
void IpcPlane::rounds(const StreamTicket& t, const HostLink& host, cudaStream_t s, std::size_t total,
                      std::size_t per, Stage stage, Take take) {
  for (std::size_t at = 0; at < total; at += per, ++round_) {
    const std::size_t n = std::min(per, total - at);
    stage(at, n);
    sync(t, s);
    host.barrier();
    take(at, n);
  }
}

void IpcPlane::allreduce(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  const std::size_t es = dtype_size(c.fp.dtype);
  const auto* in = static_cast<const char*>(c.in);
  auto* out = static_cast<char*>(c.out);
  rounds(t, host, s, c.fp.count, section_ / es,
         [&](std::size_t at, std::size_t n) { copy(t, section(host.rank), in + at * es, n * es, s); },
         [&](std::size_t at, std::size_t n) { reduce(t, c, 0, 0, out + at * es, n, s); });
}

// Chunk j (one section) is staged in round j; in round j + 1 — after the
// barrier that says every rank has staged chunk j + 1 and reduced its piece of
// chunk j — every rank's piece of chunk j is copied out. One barrier per round,
// one more at the end; the piece a rank reduces in place in its own section is
// read by the others only after the next barrier, and a section is refilled
// only after every read of it (three sections: chunks j - 1, j, j + 1).
void IpcPlane::allreduce_sharded(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  const std::size_t es = dtype_size(c.fp.dtype), per = section_ / es, count = c.fp.count;
  const std::size_t chunks = (count + per - 1) / per;
  const auto* in = static_cast<const char*>(c.in);
  auto* out = static_cast<char*>(c.out);
  auto size_of = [&](std::size_t j) { return std::min(per, count - j * per); };
  for (std::size_t j = 0; j <= chunks; ++j) {
    if (j < chunks) copy(t, section(host.rank, j), in + j * per * es, size_of(j) * es, s);
    sync(t, s);
    host.barrier();
    if (j < chunks) {
      const std::size_t n = size_of(j), lo = piece_edge(n, es, size_, host.rank),
                        hi = piece_edge(n, es, size_, host.rank + 1);
      reduce(t, c, j, lo * es, section(host.rank, j) + lo * es, hi - lo, s);
    }
    if (j > 0) {
      const std::size_t n = size_of(j - 1), base = (j - 1) * per;
      for (int q = 0; q < size_; ++q) {
        const std::size_t lo = piece_edge(n, es, size_, q), hi = piece_edge(n, es, size_, q + 1);
        copy(t, out + (base + lo) * es, section(q, j - 1) + lo * es, (hi - lo) * es, s);
      }
    }
  }
  round_ += chunks;
}

bool IpcPlane::describe(const void* p, Export* e) {
  cuda::Allocation a;
  if (!cuda::allocation_of(p, &a) || !a.legacy_ipc) return false;
  auto known = exported_.find(a.id);
  if (known == exported_.end()) {
    cudaIpcMemHandle_t h;
    if (cudaIpcGetMemHandle(&h, const_cast<char*>(a.base)) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (exported_.size() >= 1024) exported_.clear();  // ids of freed allocations pile up otherwise
    known = exported_.emplace(a.id, HandleBytes{}).first;
    std::memcpy(known->second.data(), &h, sizeof h);
  }
  e->handle = known->second;
  e->id = a.id;
  e->offset = static_cast<std::uint64_t>(static_cast<const char*>(p) - a.base);
  return true;
}

const char* IpcPlane::peer_buffer(const StreamTicket& t, int rank, const Export& e) {
  auto open = [&t](int r, const HandleBytes& h) {
    cudaIpcMemHandle_t handle;
    std::memcpy(&handle, h.data(), sizeof handle);
    return open_mapping(handle, [&](cudaError_t err) {
      fail("{} on cuda:{}: cannot map the buffer of rank {} through CUDA IPC: {} ({}); "
           "KOLO_GPU_IPC_DIRECT_BYTES=0 keeps allreduces in the ipc plane's own buffers",
           t.what, t.device, r, cudaGetErrorString(err), cudaGetErrorName(err));
    });
  };
  return mapped_.map(rank, e.id, e.handle, open) + e.offset;
}

// Reduce-scatter then allgather in the ranks' own buffers: rank r reduces
// piece r of every input into piece r of its output (no other rank writes
// there, and the others read only their own pieces of its input), and after
// a barrier copies every other piece from its owner's output. The exchange of
// the buffers' handles is the first barrier (every input is written: each
// rank waited for its stream first), the last one says every peer has read
// this rank's buffers, so its caller may write them again.
// Only where the caller's stream does not wait on this collective's ticket
// (blocking calls, the fronts, the reducer's buckets): mapping a peer's
// buffer or closing an old mapping may synchronise the device (some drivers'
// cudaIpcCloseMemHandle does), which would wait for a caller's stream that
// waits for this very collective. A rank whose stream waits says so in its
// card, and every rank takes the inbox. (Not covered: a later collective
// issued with a stream wait while this one, issued without, runs — a C++
// caller mixing both kinds in flight on one communicator.)
bool IpcPlane::allreduce_direct(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  DirectCard mine{};
  mine.ok = t.number == 0 && describe(c.in, &mine.in) && describe(c.out, &mine.out) ? 1 : 0;
  sync(t, s);
  std::vector<DirectCard> all(size_);
  host.allgather(&mine, all.data(), sizeof mine);
  for (const DirectCard& card : all)
    if (card.ok == 0) return false;  // every rank sees the same cards: all take the inbox
  const std::size_t es = dtype_size(c.fp.dtype), n = c.fp.count;
  std::vector<const char*> outs(size_);
  kernels::cuda::Inputs inputs;
  inputs.n = size_;
  const std::size_t lo = piece_edge(n, es, size_, host.rank), hi = piece_edge(n, es, size_, host.rank + 1);
  for (int r = 0; r < size_; ++r) {
    const bool me = r == host.rank;
    inputs.in[r] = (me ? static_cast<const char*>(c.in) : peer_buffer(t, r, all[r].in)) + lo * es;
    outs[r] = me ? static_cast<const char*>(c.out) : peer_buffer(t, r, all[r].out);
  }
  auto* out = static_cast<char*>(c.out);
  reduce(t, c, inputs, out + lo * es, hi - lo, s);
  sync(t, s);
  host.barrier();
  for (int q = 0; q < size_; ++q) {
    if (q == host.rank) continue;
    const std::size_t qlo = piece_edge(n, es, size_, q), qhi = piece_edge(n, es, size_, q + 1);
    copy(t, out + qlo * es, outs[q] + qlo * es, (qhi - qlo) * es, s);
  }
  sync(t, s);
  host.barrier();
  return true;
}

void IpcPlane::broadcast(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  const std::size_t es = dtype_size(c.fp.dtype);
  auto* data = static_cast<char*>(c.out);
  const int root = c.fp.root;
  rounds(t, host, s, c.fp.count, section_ / es,
         [&](std::size_t at, std::size_t n) {
           if (host.rank == root) copy(t, section(root), data + at * es, n * es, s);
         },
         [&](std::size_t at, std::size_t n) {
           if (host.rank != root) copy(t, data + at * es, section(root), n * es, s);
         });
}

// Round k moves elements [k*per, (k+1)*per) of every rank's block.
void IpcPlane::allgatherv(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  const std::size_t es = dtype_size(c.fp.dtype), per = section_ / es;
  const auto* in = static_cast<const char*>(c.in);
  auto* out = static_cast<char*>(c.out);
  std::vector<std::size_t> offset(size_ + 1, 0);
  for (int r = 0; r < size_; ++r) offset[r + 1] = offset[r] + c.counts[r];
  const std::size_t longest = *std::max_element(c.counts.begin(), c.counts.end());
  auto part = [&](int r, std::size_t at) { return c.counts[r] > at ? std::min(per, c.counts[r] - at) : 0; };
  rounds(t, host, s, longest, per,
         [&](std::size_t at, std::size_t) {
           copy(t, section(host.rank), in + at * es, part(host.rank, at) * es, s);
         },
         [&](std::size_t at, std::size_t) {
           for (int r = 0; r < size_; ++r) copy(t, out + (offset[r] + at) * es, section(r), part(r, at) * es, s);
         });
}

// Each rank's input holds size blocks of count; each round stages elements
// [at, at + n) of every block in this rank's section (block q at q*per).
void IpcPlane::stage_blocks(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s,
                            std::size_t per, std::size_t at, std::size_t n) {
  const std::size_t es = dtype_size(c.fp.dtype), count = c.fp.count;
  copy_rows(t, section(host.rank), per * es, static_cast<const char*>(c.in) + at * es, count * es, n * es, size_, s);
}

// This rank's block of every section, reduced into its output.
void IpcPlane::reduce_scatter(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  const std::size_t es = dtype_size(c.fp.dtype), per = block_elements(es);
  auto* out = static_cast<char*>(c.out);
  rounds(t, host, s, c.fp.count, per,
         [&](std::size_t at, std::size_t n) { stage_blocks(t, c, host, s, per, at, n); },
         [&](std::size_t at, std::size_t n) { reduce(t, c, 0, host.rank * per * es, out + at * es, n, s); });
}

// Block q of this rank's input goes to rank q: this rank's block of rank q's
// section is block q of its output.
void IpcPlane::alltoall(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  const std::size_t es = dtype_size(c.fp.dtype), per = block_elements(es), count = c.fp.count;
  auto* out = static_cast<char*>(c.out);
  rounds(t, host, s, count, per, [&](std::size_t at, std::size_t n) { stage_blocks(t, c, host, s, per, at, n); },
         [&](std::size_t at, std::size_t n) {
           for (int q = 0; q < size_; ++q) copy(t, out + (q * count + at) * es, section(q) + host.rank * per * es, n * es, s);
         });
}

}  // namespace

std::unique_ptr<Plane> make_ipc_plane(int size, Farewell farewell) {
  return std::make_unique<IpcPlane>(size, std::move(farewell));
}

}  // namespace kolo::gpu
