// The "host" data plane for CUDA memory: a collective's device buffers are
// copied to pinned host memory, the host transport (shared memory, TCP, the
// hierarchy) runs the collective there, and the result is copied back. It
// works wherever kolo's host transports do — ranks sharing a GPU, one GPU
// each, several hosts — at the cost of two PCIe/NVLink-C2C copies.
//
// Ordering with the caller's stream. At issue (the caller's thread) an event
// is recorded on the caller's stream: the copies to the host wait for it on
// kolo's own stream, so the collective reads what the work queued before it
// wrote. Then the caller's stream is made to wait, on the GPU, until a
// 32-bit word in mapped pinned memory reaches the collective's ticket number
// (cuStreamWaitValue32): work queued there after the collective runs after
// it, and the host never blocks. The engine writes the ticket once the result
// is back in device memory — or when the collective failed or was dropped, so
// that no stream waits for ever. Tickets are numbered in the order
// collectives are queued on the engine (the communicator's issue lock), which
// runs them in that order, so the word only ever grows (cyclically). Where
// the driver offers no stream memory operations, the result is ready after
// Work::wait() only (said once in the log).
//
// kolo's streams are non-blocking (cudaStreamNonBlocking): the legacy default
// stream, which a caller's stream may be and which waits for every blocking
// stream, must never wait for kolo's, nor kolo's for it. Pinned memory is
// allocated at issue, on the caller's thread, and only freed with the plane:
// cudaFreeHost synchronises the device, which would wait for a stream that
// waits for the engine.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "transport/cuda/runtime.h"
#include "transport/gpu.h"

namespace kolo::gpu {

namespace {

constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool overlapping(const void* a, std::size_t an, const void* b, std::size_t bn) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x == y || (an > 0 && bn > 0 && x < y + bn && y < x + an);
}

class StagedPlane;

class StagedTicket : public Ticket {
 public:
  StagedTicket(StagedPlane& plane, const char* what, int device) : plane(plane), what(what), device(device) {}
  ~StagedTicket() override;
  void release();

  StagedPlane& plane;
  const char* what;
  int device;
  std::uint32_t number = 0;
  cudaEvent_t input_ready = nullptr;
  char* staging = nullptr;  // pinned, at least the issue's staging_bytes
  bool released = false;
};

class StagedPlane : public Plane {
 public:
  ~StagedPlane() override;
  const char* name() const override { return "host"; }
  std::shared_ptr<Ticket> issue(const char* what, const Place& place, std::size_t staging_bytes) override;
  void staged(Ticket& t, const void* in, std::size_t in_bytes, void* out, std::size_t out_bytes,
              const std::function<void(const void*, void*)>& host) override;

  // The word the callers' streams wait on reaches `number` (never goes back).
  void release(std::uint32_t number);

 private:
  cudaStream_t stream_of(int device, const char* what);  // engine thread

  std::uint32_t* flag_ = nullptr;  // mapped pinned memory; the streams wait on it
  std::uint32_t issued_ = 0;       // the last ticket's number (issue lock)
  bool stream_waits_ = true;       // cuStreamWaitValue32 works here (issue lock)
  std::vector<char*> pinned_;      // every staging block allocated; the last is the current one
  std::size_t capacity_ = 0;       // bytes of the current block
  std::map<int, cudaStream_t> streams_;  // kolo's stream per device (engine thread)
};

StagedTicket::~StagedTicket() {
  release();
  if (input_ready != nullptr) (void)cudaEventDestroy(input_ready);
}

void StagedTicket::release() {
  if (released) return;
  released = true;
  if (number != 0) plane.release(number);
}

void StagedPlane::release(std::uint32_t number) {
  std::atomic_ref<std::uint32_t> word(*flag_);
  std::uint32_t now = word.load(std::memory_order_relaxed);
  while (static_cast<std::int32_t>(number - now) > 0 &&
         !word.compare_exchange_weak(now, number, std::memory_order_release, std::memory_order_relaxed)) {
  }
}

StagedPlane::~StagedPlane() {
  // Nothing is queued any more (the engine went first): let every stream go
  // before the memory it waits on is freed.
  if (flag_ != nullptr) release(issued_);
  for (auto& [device, s] : streams_) {
    (void)cudaSetDevice(device);
    (void)cudaStreamSynchronize(s);
    (void)cudaStreamDestroy(s);
  }
  for (char* p : pinned_) (void)cudaFreeHost(p);
  if (flag_ != nullptr) (void)cudaFreeHost(flag_);
}

std::shared_ptr<Ticket> StagedPlane::issue(const char* what, const Place& place, std::size_t staging_bytes) {
  cuda::DeviceScope on(place.device, what);
  auto t = std::make_shared<StagedTicket>(*this, what, place.device);
  if (flag_ == nullptr) {
    void* p = nullptr;
    KOLO_CUDA_CHECK(cudaHostAlloc(&p, sizeof(std::uint32_t), cudaHostAllocMapped | cudaHostAllocPortable), what,
                    place.device);
    flag_ = static_cast<std::uint32_t*>(p);
    *flag_ = 0;
  }
  if (staging_bytes > capacity_ || pinned_.empty()) {
    // Grown to the next power of two: a training loop's sizes settle at once.
    std::size_t want = std::max<std::size_t>(staging_bytes, 1 << 20);
    want = std::size_t(1) << (64 - __builtin_clzll(want - 1));
    void* p = nullptr;
    KOLO_CUDA_CHECK(cudaHostAlloc(&p, want, cudaHostAllocPortable), what, place.device);
    pinned_.push_back(static_cast<char*>(p));
    capacity_ = want;
  }
  t->staging = pinned_.back();
  auto stream = static_cast<cudaStream_t>(place.stream);
  KOLO_CUDA_CHECK(cudaEventCreateWithFlags(&t->input_ready, cudaEventDisableTiming), what, place.device);
  KOLO_CUDA_CHECK(cudaEventRecord(t->input_ready, stream), what, place.device);
  if (stream_waits_) {
    const std::uint32_t number = issued_ + 1;
    const auto wait = cuda::wait_value32();
    if (wait != nullptr && wait(stream, reinterpret_cast<std::uintptr_t>(flag_), number, cuda::kWaitGeq) == 0) {
      issued_ = number;
      t->number = number;
    } else {
      stream_waits_ = false;
      log(LogLevel::Info, "cuda:{}: the driver offers no stream memory operations "
          "(cuStreamWaitValue32): results of collectives on CUDA memory are ready after Work::wait() "
          "(or the blocking call's return), not on the caller's stream before it", place.device);
    }
  }
  return t;
}

cudaStream_t StagedPlane::stream_of(int device, const char* what) {
  auto it = streams_.find(device);
  if (it != streams_.end()) return it->second;
  cudaStream_t s = nullptr;
  KOLO_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), what, device);
  streams_.emplace(device, s);
  return s;
}

void StagedPlane::staged(Ticket& ticket, const void* in, std::size_t in_bytes, void* out, std::size_t out_bytes,
                         const std::function<void(const void*, void*)>& host) {
  auto& t = static_cast<StagedTicket&>(ticket);
  cuda::DeviceScope on(t.device, t.what);
  const cudaStream_t s = stream_of(t.device, t.what);
  // Where the copies go: one block when the buffers overlap (in place), so
  // that the host collective sees the same relation between them.
  char* host_in = t.staging;
  char* host_out = t.staging + aligned(in_bytes);
  if (overlapping(in, in_bytes, out, out_bytes)) {
    const auto lo = std::min(reinterpret_cast<std::uintptr_t>(in), reinterpret_cast<std::uintptr_t>(out));
    host_in = t.staging + (reinterpret_cast<std::uintptr_t>(in) - lo);
    host_out = t.staging + (reinterpret_cast<std::uintptr_t>(out) - lo);
  }
  KOLO_CUDA_CHECK(cudaStreamWaitEvent(s, t.input_ready, 0), t.what, t.device);
  if (in_bytes > 0) KOLO_CUDA_CHECK(cudaMemcpyAsync(host_in, in, in_bytes, cudaMemcpyDeviceToHost, s), t.what, t.device);
  KOLO_CUDA_CHECK(cudaStreamSynchronize(s), t.what, t.device);
  host(host_in, host_out);
  if (out_bytes > 0)
    KOLO_CUDA_CHECK(cudaMemcpyAsync(out, host_out, out_bytes, cudaMemcpyHostToDevice, s), t.what, t.device);
  KOLO_CUDA_CHECK(cudaStreamSynchronize(s), t.what, t.device);
  t.release();
}

}  // namespace

std::size_t Plane::staging_bytes(const void* in, std::size_t in_bytes, const void* out, std::size_t out_bytes) {
  if (!overlapping(in, in_bytes, out, out_bytes)) return aligned(in_bytes) + out_bytes;
  const auto a = reinterpret_cast<std::uintptr_t>(in), b = reinterpret_cast<std::uintptr_t>(out);
  return std::max(a + in_bytes, b + out_bytes) - std::min(a, b);
}

std::unique_ptr<Plane> make_plane() {
  const std::string want = config::gpu_transport();
  if (want != "auto" && want != "host")
    fail("KOLO_GPU_TRANSPORT={} is not a data plane of this kolo: it moves CUDA memory through pinned host "
         "memory (host) only; use auto or host",
         want);
  return std::make_unique<StagedPlane>();
}

std::string planned_plane() { return "host"; }

}  // namespace kolo::gpu
