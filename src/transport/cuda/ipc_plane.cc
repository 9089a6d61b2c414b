// The "ipc" data plane for CUDA memory: ranks of one host — sharing a GPU or
// each with its own — read each other's device memory through CUDA IPC, and
// kolo's own kernel reduces it (kernels/reduce_cuda.h).
//
// Each rank lends its peers one device buffer, its inbox (KOLO_GPU_IPC_BYTES,
// the same on every rank), allocated at the first collective's issue and
// mapped by every peer (cudaIpcOpenMemHandle) at its run, the handles
// exchanged through the host transport inside that collective. A collective
// moves in rounds of at most one inbox per rank:
//   1. each rank copies its part of the round into its inbox (kolo's stream,
//      after the caller's input event), and waits for the copy;
//   2. host barrier: every inbox holds its part;
//   3. each rank reads its peers' inboxes — the reduction kernel over all
//      inboxes in rank order (allreduce, reduce_scatter: so every rank gets the
//      same bits), or copies from them (broadcast, allgather, alltoall) — into
//      its output, and waits;
//   4. host barrier: every inbox has been read and may be refilled.
// No kernel ever waits on another rank (the host barriers do): a rank that
// dies leaves no kernel spinning, and its peers fail in the barrier, naming it.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "kernels/reduce_cuda.h"
#include "transport/cuda/caller_stream.h"
#include "transport/cuda/planes.h"
#include "transport/cuda/runtime.h"

namespace kolo::gpu {

namespace {

// What a rank tells its peers about its inbox.
struct Card {
  cudaIpcMemHandle_t handle;
  std::int32_t device;
  std::int32_t pid;
  std::uint64_t bytes;
};

class IpcPlane : public Plane {
 public:
  explicit IpcPlane(int size) : size_(size), capacity_(static_cast<std::size_t>(config::gpu_ipc_bytes())) {
    if (config::gpu_ipc_bytes() < 4096)
      fail("KOLO_GPU_IPC_BYTES={} is too small for the ipc plane (at least 4096)", config::gpu_ipc_bytes());
  }
  ~IpcPlane() override;
  const char* name() const override { return "ipc"; }
  std::shared_ptr<Ticket> issue(const Call& call, const Place& place) override;
  void run(Ticket& ticket, const Call& c, const HostLink& host) override;

 private:
  void open_peers(const StreamTicket& t, const HostLink& host);
  void sync(const StreamTicket& t, cudaStream_t s) {
    KOLO_CUDA_CHECK(cudaStreamSynchronize(s), t.what, t.device);
  }
  void copy(const StreamTicket& t, void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
    if (bytes > 0) KOLO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), t.what, t.device);
  }
  // Copies `rows` rows of `width` bytes, from src every src_pitch bytes to dst every dst_pitch bytes.
  void copy_rows(const StreamTicket& t, void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                 std::size_t width, std::size_t rows, cudaStream_t s) {
    if (width > 0 && rows > 0)
      KOLO_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault, s), t.what,
                      t.device);
  }
  void reduce(const StreamTicket& t, DType dt, Op op, std::size_t offset, void* out, std::size_t count,
              cudaStream_t s);

  void allreduce(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  void broadcast(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  void allgatherv(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  void reduce_scatter(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  void alltoall(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s);
  template <class Stage, class Take>
  void rounds(const StreamTicket& t, const HostLink& host, cudaStream_t s, std::size_t total, std::size_t per,
              Stage stage, Take take);
  void stage_blocks(const StreamTicket& t, const Call& c, cudaStream_t s, std::size_t per, std::size_t at,
                    std::size_t n);

  CallerStreams streams_;
  const int size_;
  const std::size_t capacity_;  // bytes of every rank's inbox
  int device_ = -1;             // this rank's device: the first collective's
  char* inbox_ = nullptr;
  std::vector<char*> peers_;    // every rank's inbox as this process maps it (its own: inbox_)
};

IpcPlane::~IpcPlane() {
  streams_.release_all();
  if (device_ >= 0) (void)cudaSetDevice(device_);
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r)
    if (peers_[r] != nullptr && peers_[r] != inbox_) (void)cudaIpcCloseMemHandle(peers_[r]);
  if (inbox_ != nullptr) (void)cudaFree(inbox_);
}

std::shared_ptr<Ticket> IpcPlane::issue(const Call& call, const Place& place) {
  if (device_ >= 0 && place.device != device_)
    fail("{}: the ipc plane serves one CUDA device per rank: this rank's collectives so far used cuda:{}, "
         "this one cuda:{} (KOLO_GPU_TRANSPORT=host serves any)",
         call.what, device_, place.device);
  if (inbox_ == nullptr) {
    cuda::DeviceScope on(place.device, call.what);
    void* p = nullptr;
    KOLO_CUDA_CHECK(cudaMalloc(&p, capacity_), call.what, place.device);
    inbox_ = static_cast<char*>(p);
    device_ = place.device;
  }
  return streams_.issue(call.what, place);
}

void IpcPlane::open_peers(const StreamTicket& t, const HostLink& host) {
  Card mine{};
  KOLO_CUDA_CHECK(cudaIpcGetMemHandle(&mine.handle, inbox_), t.what, t.device);
  mine.device = device_;
  mine.pid = static_cast<std::int32_t>(::getpid());
  mine.bytes = capacity_;
  std::vector<Card> all(size_);
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
    void* p = nullptr;
    const cudaError_t e = cudaIpcOpenMemHandle(&p, all[r].handle, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail("{} on cuda:{}: cannot map the device memory of rank {} (pid {}, cuda:{} in its process) through CUDA "
           "IPC: {} ({}); KOLO_GPU_TRANSPORT=host works without it",
           t.what, t.device, r, all[r].pid, all[r].device, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    peers_[r] = static_cast<char*>(p);
  }
}

void IpcPlane::reduce(const StreamTicket& t, DType dt, Op op, std::size_t offset, void* out, std::size_t count,
                      cudaStream_t s) {
  kernels::cuda::Inputs inputs;
  inputs.n = size_;
  for (int r = 0; r < size_; ++r) inputs.in[r] = peers_[r] + offset;
  const Op kop = op == Op::Average ? Op::Sum : op;
  const int divisor = op == Op::Average ? size_ : 0;
  KOLO_CUDA_CHECK(kernels::cuda::reduce(dt, kop, inputs, out, count, divisor, s), t.what, t.device);
}

void IpcPlane::run(Ticket& ticket, const Call& c, const HostLink& host) {
  auto& t = static_cast<StreamTicket&>(ticket);
  cuda::set_device(t.device, t.what);  // the engine's thread: no need to put a device back
  const cudaStream_t s = streams_.stream(t.device, t.what);
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
    case Kind::Allreduce: allreduce(t, c, host, s); break;
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
// of `total`: stage(at, n) fills this rank's inbox, every rank waits until
// every inbox is filled (its stream, then the host barrier), take(at, n)
// reads the peers' inboxes, and every rank waits again before an inbox is
// refilled. No kernel ever waits on another rank.
template <class Stage, class Take>
void IpcPlane::rounds(const StreamTicket& t, const HostLink& host, cudaStream_t s, std::size_t total,
                      std::size_t per, Stage stage, Take take) {
  for (std::size_t at = 0; at < total; at += per) {
    const std::size_t n = std::min(per, total - at);
    stage(at, n);
    sync(t, s);
    host.barrier();
    take(at, n);
    sync(t, s);
    host.barrier();
  }
}

void IpcPlane::allreduce(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  const std::size_t es = dtype_size(c.fp.dtype);
  const auto* in = static_cast<const char*>(c.in);
  auto* out = static_cast<char*>(c.out);
  rounds(t, host, s, c.fp.count, capacity_ / es,
         [&](std::size_t at, std::size_t n) { copy(t, inbox_, in + at * es, n * es, s); },
         [&](std::size_t at, std::size_t n) { reduce(t, c.fp.dtype, c.fp.op, 0, out + at * es, n, s); });
}

void IpcPlane::broadcast(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  const std::size_t es = dtype_size(c.fp.dtype);
  auto* data = static_cast<char*>(c.out);
  const int root = c.fp.root;
  rounds(t, host, s, c.fp.count, capacity_ / es,
         [&](std::size_t at, std::size_t n) {
           if (host.rank == root) copy(t, inbox_, data + at * es, n * es, s);
         },
         [&](std::size_t at, std::size_t n) {
           if (host.rank != root) copy(t, data + at * es, peers_[root], n * es, s);
         });
}

// Round k moves elements [k*per, (k+1)*per) of every rank's block.
void IpcPlane::allgatherv(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  const std::size_t es = dtype_size(c.fp.dtype), per = capacity_ / es;
  const auto* in = static_cast<const char*>(c.in);
  auto* out = static_cast<char*>(c.out);
  std::vector<std::size_t> offset(size_ + 1, 0);
  for (int r = 0; r < size_; ++r) offset[r + 1] = offset[r] + c.counts[r];
  const std::size_t longest = *std::max_element(c.counts.begin(), c.counts.end());
  auto part = [&](int r, std::size_t at) { return c.counts[r] > at ? std::min(per, c.counts[r] - at) : 0; };
  rounds(t, host, s, longest, per,
         [&](std::size_t at, std::size_t) { copy(t, inbox_, in + at * es, part(host.rank, at) * es, s); },
         [&](std::size_t at, std::size_t) {
           for (int r = 0; r < size_; ++r) copy(t, out + (offset[r] + at) * es, peers_[r], part(r, at) * es, s);
         });
}

// Each rank's input holds size blocks of count; each round stages elements
// [at, at + n) of every block in this rank's inbox (block q at q*per).
void IpcPlane::stage_blocks(const StreamTicket& t, const Call& c, cudaStream_t s, std::size_t per, std::size_t at,
                            std::size_t n) {
  const std::size_t es = dtype_size(c.fp.dtype), count = c.fp.count;
  copy_rows(t, inbox_, per * es, static_cast<const char*>(c.in) + at * es, count * es, n * es, size_, s);
}

// This rank's block of every inbox, reduced into its output.
void IpcPlane::reduce_scatter(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  const std::size_t es = dtype_size(c.fp.dtype), per = capacity_ / es / size_;
  auto* out = static_cast<char*>(c.out);
  rounds(t, host, s, c.fp.count, per, [&](std::size_t at, std::size_t n) { stage_blocks(t, c, s, per, at, n); },
         [&](std::size_t at, std::size_t n) {
           reduce(t, c.fp.dtype, c.fp.op, host.rank * per * es, out + at * es, n, s);
         });
}

// Block q of this rank's input goes to rank q: this rank's block of rank q's
// inbox is block q of its output.
void IpcPlane::alltoall(const StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s) {
  const std::size_t es = dtype_size(c.fp.dtype), per = capacity_ / es / size_, count = c.fp.count;
  auto* out = static_cast<char*>(c.out);
  rounds(t, host, s, count, per, [&](std::size_t at, std::size_t n) { stage_blocks(t, c, s, per, at, n); },
         [&](std::size_t at, std::size_t n) {
           for (int q = 0; q < size_; ++q)
             copy(t, out + (q * count + at) * es, peers_[q] + host.rank * per * es, n * es, s);
         });
}

}  // namespace

std::unique_ptr<Plane> make_ipc_plane(int size) { return std::make_unique<IpcPlane>(size); }

}  // namespace kolo::gpu
