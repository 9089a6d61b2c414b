// The "nccl" data plane for CUDA memory: NCCL, loaded at run time
// (nccl_library.h), moves the data of ranks that each own a GPU — as Horovod
// and torch's ProcessGroupNCCL use it — while kolo's engine keeps everything
// else: the call order, the fingerprint check before any byte moves, the
// timeline, the caller's stream (caller_stream.h). A collective's run issues
// the NCCL call on kolo's stream, after the caller's input event, and waits
// there; then the caller's stream goes on.
//
// The NCCL communicator is made inside the first collective's run, where every
// rank is: rank 0's unique id reaches the others through the host transport,
// then NCCL forms it on this rank's device — non-blocking where NCCL allows,
// so that a peer lost meanwhile costs a deadline, not a hang (nccl_comm.h).
// NCCL refuses two ranks on one GPU ("Duplicate GPU detected"): the ipc and
// host planes serve those.
//
// What NCCL would do otherwise than kolo's contract goes to the host plane,
// decided from the call alone (so every rank decides alike): reductions of
// f16 and bf16, which kolo reduces in f32 and NCCL in their own type.
//
// A wait on NCCL never blocks for ever: the engine thread polls the stream and
// NCCL's asynchronous error, and asks the host transport whether a peer is
// known gone (PeerWatch: a dead process, a closed connection — at once, where
// NCCL would wait for it until the deadline); on an error, a lost peer, or past
// KOLO_TIMEOUT_MS (a peer that stopped), the NCCL communicator is aborted,
// which stops its kernels — nothing is left spinning on the GPU — and the
// collective fails with NCCL's message or the host's naming the peer; the
// communicator is broken from then on, as after any failure.
#include <cuda_runtime_api.h>

#include <chrono>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "kernels/reduce_cuda.h"
#include "transport/cuda/caller_stream.h"
#include "transport/cuda/nccl_comm.h"
#include "transport/cuda/nccl_library.h"
#include "transport/cuda/planes.h"
#include "transport/cuda/runtime.h"

namespace kolo::gpu {

namespace {

int nccl_type(DType t) {
  switch (t) {
    case DType::F32: return nccl::kFloat32;
    case DType::F64: return nccl::kFloat64;
    case DType::F16: return nccl::kFloat16;
    case DType::BF16: return nccl::kBfloat16;
    case DType::I32: return nccl::kInt32;
    case DType::I64: return nccl::kInt64;
    case DType::U8: return nccl::kUint8;
  }
  return nccl::kUint8;
}

int nccl_op(Op op) {
  switch (op) {
    case Op::Sum: return nccl::kSum;
    case Op::Average: return nccl::kSum;  // then kolo's divide (divide_average)
    case Op::Min: return nccl::kMin;
    case Op::Max: return nccl::kMax;
    case Op::Product: return nccl::kProd;
  }
  return nccl::kSum;
}

bool reduces(Kind k) { return k == Kind::Allreduce || k == Kind::ReduceScatter; }

// While NCCL works, the host transport is asked every kEvery whether a peer is
// known gone. One found gone may have finished its part first (it exited right
// after the collective): the work gets kGrace to complete before the
// collective fails with the host's error naming the peer.
class PeerWatch {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kEvery = std::chrono::milliseconds(50);
  static constexpr auto kGrace = std::chrono::seconds(1);

  void start(const HostLink& host) {
    host_ = &host;
    lost_ = nullptr;
    checked_ = Clock::now();
  }
  // Throws the host's error once a lost peer's grace has passed.
  void operator()() {
    const auto now = Clock::now();
    if (lost_) {
      if (now - lost_at_ >= kGrace) std::rethrow_exception(lost_);
      return;
    }
    if (now - checked_ < kEvery || host_ == nullptr || !host_->check_peers) return;
    checked_ = now;
    try {
      host_->check_peers();
    } catch (...) {
      lost_ = std::current_exception();
      lost_at_ = now;
    }
  }

 private:
  const HostLink* host_ = nullptr;  // the running collective's
  std::exception_ptr lost_;
  Clock::time_point checked_, lost_at_;
};

// Rank 0's unique id as every rank receives it, and whether rank 0 got one.
struct Invitation {
  std::int32_t ok;
  nccl::UniqueId id;
};

class NcclPlane : public Plane {
 public:
  NcclPlane(const nccl::Library& lib, int size, std::unique_ptr<Plane> host)
      : lib_(lib), size_(size), host_(std::move(host)) {}
  ~NcclPlane() override {
    streams_.release_all();
    nccl::finish(lib_, comm_, nonblocking_, std::chrono::milliseconds(config::peer_timeout_ms()));
  }
  PlaneCode code() const override { return PlaneCode::Nccl; }

  std::shared_ptr<Ticket> issue(const Call& call, const Place& place) override {
    if (to_host(call)) return host_->issue(call, place);
    if (device_ >= 0 && place.device != device_)
      fail("{}: the nccl plane serves one CUDA device per rank: this rank's collectives so far used cuda:{}, "
           "this one cuda:{} (KOLO_GPU_TRANSPORT=host serves any)",
           call.what, device_, place.device);
    const bool first = device_ < 0;  // its run forms NCCL's communicator
    device_ = place.device;
    return streams_.issue(call.what, place, first);
  }

  void run(Ticket& ticket, const Call& c, const HostLink& host) override {
    if (to_host(c)) return host_->run(ticket, c, host);
    auto& t = static_cast<StreamTicket&>(ticket);
    const cudaStream_t s = streams_.start(t);
    if (aborted_)
      fail("{} on cuda:{}: the NCCL communicator was aborted after an earlier failure", t.what, t.device);
    watch_.start(host);
    if (comm_ == nullptr) connect(t, host);
    KOLO_CUDA_CHECK(cudaStreamWaitEvent(s, t.input_ready, 0), t.what, t.device);
    if (c.in_bytes == 0 && c.out_bytes == 0) {  // nothing to move: the collective's synchronisation only
      host.barrier();
      t.release();
      return;
    }
    const std::size_t unit = dtype_size(c.fp.dtype);
    const char* in = static_cast<const char*>(c.in);
    char* out = static_cast<char*>(c.out);
    switch (c.fp.kind) {
      case Kind::Allreduce:
        check(t, lib_.all_reduce(in, out, c.out_bytes / unit, nccl_type(c.fp.dtype), nccl_op(c.fp.op), comm_, s));
        divide_average(t, c, unit, s);
        break;
      case Kind::ReduceScatter:
        check(t, lib_.reduce_scatter(in, out, c.out_bytes / unit, nccl_type(c.fp.dtype), nccl_op(c.fp.op), comm_,
                                     s));
        divide_average(t, c, unit, s);
        break;
      // The data movers move bytes: any dtype, f16 and bf16 included.
      case Kind::Broadcast:
        check(t, lib_.broadcast(c.in_bytes > 0 ? in : out, out, c.out_bytes, nccl::kUint8, c.fp.root, comm_, s));
        break;
      case Kind::Allgather: check(t, lib_.all_gather(in, out, c.in_bytes, nccl::kUint8, comm_, s)); break;
      case Kind::Allgatherv: allgatherv(t, c, unit, s); break;
      case Kind::Alltoall: alltoall(t, c, s); break;
      case Kind::Alltoallv:
      case Kind::Barrier: fail("{}: not on CUDA memory (the communicator refuses it first)", t.what);
    }
    wait(t, s);
    t.release();
  }

 private:
  static bool to_host(const Call& c) {
    return reduces(c.fp.kind) && (c.fp.dtype == DType::F16 || c.fp.dtype == DType::BF16);
  }

  // A call on a non-blocking communicator returns kInProgress while NCCL
  // carries it out: settled before anything else is queued after it — the
  // calls inside a group are carried out by its end (`grouped`).
  void check(const StreamTicket& t, nccl::Result r, bool grouped = false) {
    if (r == nccl::kInProgress && !grouped) r = nccl::settle(lib_, comm_, limit(), watching());
    if (r == nccl::kSuccess || (r == nccl::kInProgress && grouped)) return;
    abort();
    if (r == nccl::kInProgress)
      fail("{} on cuda:{}: NCCL did not take the call within KOLO_TIMEOUT_MS={} ms (a peer stopped or died?); the "
           "NCCL communicator was aborted",
           t.what, t.device, config::timeout_ms());
    fail("{} on cuda:{}: NCCL ({}) failed: {}", t.what, t.device, lib_.path, nccl::describe(lib_, r));
  }

  static std::chrono::milliseconds limit() { return std::chrono::milliseconds(config::timeout_ms()); }

  // The peer watch for a poll: a lost peer aborts the NCCL communicator (its
  // kernels stop) before the host's error goes up.
  std::function<void()> watching() {
    return [this] {
      try {
        watch_();
      } catch (...) {
        abort();
        throw;
      }
    };
  }

  // Average: NCCL's ncclAvg scales each input by 1/n before summing (floats),
  // which is not kolo's sum divided by n bit for bit: the sum divided here by
  // kolo's own kernel, as the ipc plane and the host do.
  void divide_average(const StreamTicket& t, const Call& c, std::size_t unit, cudaStream_t s) {
    if (c.fp.op != Op::Average) return;
    kernels::cuda::Inputs sum;
    sum.n = 1;
    sum.in[0] = c.out;
    KOLO_CUDA_CHECK(kernels::cuda::reduce(c.fp.dtype, Op::Sum, sum, c.out, c.out_bytes / unit, size_, s), t.what,
                    t.device);
  }

  void abort() {
    if (comm_ != nullptr) (void)lib_.comm_abort(comm_);
    comm_ = nullptr;
    aborted_ = true;
  }

  void connect(const StreamTicket& t, const HostLink& host) {
    Invitation mine{};
    if (host.rank == 0) mine.ok = lib_.get_unique_id(&mine.id) == nccl::kSuccess;
    std::vector<Invitation> all(static_cast<std::size_t>(size_));
    host.allgather(&mine, all.data(), sizeof mine);
    if (!all[0].ok) fail("{} on cuda:{}: rank 0 could not make an NCCL unique id ({})", t.what, t.device, lib_.path);
    nccl::Comm comm = nullptr;
    nccl::Result r = nccl::kInternalError;
    try {
      r = nccl::form(lib_, &comm, size_, all[0].id, host.rank, limit(), &nonblocking_, watch_);
    } catch (...) {  // a peer lost
      aborted_ = true;
      throw;
    }
    // On any failure form() let the half-formed communicator go.
    if (r != nccl::kSuccess) aborted_ = true;
    if (r == nccl::kInProgress)
      fail("{} on cuda:{}: NCCL ({}) did not form its communicator of {} ranks within KOLO_TIMEOUT_MS={} ms (a "
           "peer stopped or died?); it was aborted",
           t.what, t.device, lib_.path, size_, config::timeout_ms());
    if (r != nccl::kSuccess)
      fail("{} on cuda:{}: NCCL ({}) could not form its communicator of {} ranks: {} (NCCL needs a GPU of its own "
           "for each rank: KOLO_GPU_TRANSPORT=ipc or host serves ranks that share one)",
           t.what, t.device, lib_.path, size_, nccl::describe(lib_, r));
    comm_ = comm;
    rank_ = host.rank;
  }

  // Each rank's block broadcast from it, in one NCCL group.
  void allgatherv(const StreamTicket& t, const Call& c, std::size_t unit, cudaStream_t s) {
    check(t, lib_.group_start());
    std::size_t at = 0;
    for (int r = 0; r < size_; ++r) {
      const std::size_t bytes = c.counts[static_cast<std::size_t>(r)] * unit;
      char* block = static_cast<char*>(c.out) + at;
      check(t, lib_.broadcast(r == rank_ ? c.in : block, block, bytes, nccl::kUint8, r, comm_, s), true);
      at += bytes;
    }
    check(t, lib_.group_end());
  }

  // A send and a receive per peer, in one NCCL group.
  void alltoall(const StreamTicket& t, const Call& c, cudaStream_t s) {
    const std::size_t per = c.in_bytes / static_cast<std::size_t>(size_);
    check(t, lib_.group_start());
    for (int r = 0; r < size_; ++r) {
      check(t, lib_.send(static_cast<const char*>(c.in) + r * per, per, nccl::kUint8, r, comm_, s), true);
      check(t, lib_.recv(static_cast<char*>(c.out) + r * per, per, nccl::kUint8, r, comm_, s), true);
    }
    check(t, lib_.group_end());
  }

  // Until the stream has run the NCCL call (see the file's comment).
  void wait(const StreamTicket& t, cudaStream_t s) {
    const auto watch = watching();
    const cudaError_t e = cuda::poll([s] { return cudaStreamQuery(s); }, limit(), [&] {
      watch();
      nccl::Result async = nccl::kSuccess;
      if (lib_.comm_get_async_error(comm_, &async) != nccl::kSuccess ||
          (async != nccl::kSuccess && async != nccl::kInProgress)) {
        abort();
        fail("{} on cuda:{}: NCCL ({}) reported: {}", t.what, t.device, lib_.path, nccl::describe(lib_, async));
      }
    });
    if (e == cudaSuccess) return;
    abort();
    if (e == cudaErrorNotReady)
      fail("{} on cuda:{}: NCCL did not complete within KOLO_TIMEOUT_MS={} ms (a peer stopped or died?); the "
           "NCCL communicator was aborted",
           t.what, t.device, config::timeout_ms());
    cuda::check(e, "cudaStreamQuery", t.what, t.device);
  }

  // Declared first: destroyed last, once the streams waiting on its word have been let go.
  CallerStreams streams_;
  const nccl::Library& lib_;
  const int size_;
  std::unique_ptr<Plane> host_;  // what NCCL does not do as kolo does (to_host)
  int rank_ = -1;    // this rank in the NCCL communicator (the kolo communicator's)
  int device_ = -1;  // this rank's device: the first collective's
  nccl::Comm comm_ = nullptr;
  bool nonblocking_ = false;  // NCCL ≥ 2.14: every call settled (nccl_comm.h)
  bool aborted_ = false;
  PeerWatch watch_;
};

}  // namespace

std::unique_ptr<Plane> make_nccl_plane(const nccl::Library& lib, int size, std::unique_ptr<Plane> host) {
  return std::make_unique<NcclPlane>(lib, size, std::move(host));
}

}  // namespace kolo::gpu
