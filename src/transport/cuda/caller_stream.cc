#include "transport/cuda/caller_stream.h"

#include <atomic>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "transport/cuda/runtime.h"

namespace kolo::gpu {

StreamTicket::~StreamTicket() {
  release();
  if (input_ready != nullptr) (void)cudaEventDestroy(input_ready);
}

void StreamTicket::release() {
  if (released) return;
  released = true;
  if (number != 0) book.release(number);
}

void StreamTicket::failed() noexcept {
  if (own != nullptr && !released) {
    // input_ready has served kolo's stream already: recorded again, it marks
    // the end of what this run queued there.
    if (cudaEventRecord(input_ready, own) == cudaSuccess) (void)cudaStreamWaitEvent(caller, input_ready, 0);
    (void)cudaGetLastError();
  }
  release();
}

void CallerStreams::release(std::uint32_t number) {
  std::atomic_ref<std::uint32_t> word(*flag_);
  std::uint32_t now = word.load(std::memory_order_relaxed);
  while (static_cast<std::int32_t>(number - now) > 0 &&
         !word.compare_exchange_weak(now, number, std::memory_order_release, std::memory_order_relaxed)) {
  }
}

void CallerStreams::release_all() {
  if (flag_ != nullptr) release(issued_);
}

CallerStreams::CallerStreams() : stream_waits_(config::gpu_stream_wait()) {}

CallerStreams::~CallerStreams() {
  // Nothing is queued any more (the engine went first): let every stream go
  // before the memory it waits on is freed.
  release_all();
  drain();
  for (auto& [device, s] : streams_) cuda::quietly_on(device, [s = s] { (void)cudaStreamDestroy(s); });
  if (flag_ != nullptr) (void)cudaFreeHost(flag_);
}

void CallerStreams::drain() {
  for (auto& [device, s] : streams_)
    cuda::quietly_on(device, [s = s] {
      (void)cuda::poll([s] { return cudaStreamQuery(s); }, std::chrono::milliseconds(config::timeout_ms()));
    });
}

std::shared_ptr<StreamTicket> CallerStreams::issue(const char* what, const Place& place, bool sets_up) {
  cuda::DeviceScope on(place.device, what);
  auto t = std::make_shared<StreamTicket>(*this, what, place.device);
  if (flag_ == nullptr) {
    void* p = nullptr;
    KOLO_CUDA_CHECK(cudaHostAlloc(&p, sizeof(std::uint32_t), cudaHostAllocMapped | cudaHostAllocPortable), what,
                    place.device);
    flag_ = static_cast<std::uint32_t*>(p);
    *flag_ = 0;
  }
  auto caller = static_cast<cudaStream_t>(place.stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  KOLO_CUDA_CHECK(cudaStreamIsCapturing(caller, &capture), what, place.device);
  if (capture != cudaStreamCaptureStatusNone)
    fail("{} on cuda:{}: the caller's stream is being captured into a CUDA graph, which cannot hold a kolo "
         "collective (its data moves outside the graph): run the collective outside the captured region",
         what, place.device);
  t->caller = caller;
  KOLO_CUDA_CHECK(cudaEventCreateWithFlags(&t->input_ready, cudaEventDisableTiming), what, place.device);
  KOLO_CUDA_CHECK(cudaEventRecord(t->input_ready, caller), what, place.device);
  if (stream_waits_ && place.stream_waits) {
    if (sets_up) {  // no wait on a run that sets the plane up: the caller waits instead
      t->complete_before_return = true;
      return t;
    }
    std::uint32_t number = issued_ + 1;
    if (number == 0) number = 1;  // 0 means "does not wait": skipped when the count wraps
    const auto wait = cuda::wait_value32();
    if (wait != nullptr && wait(caller, reinterpret_cast<std::uintptr_t>(flag_), number, cuda::kWaitGeq) == 0) {
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

cudaStream_t CallerStreams::start(StreamTicket& t) {
  cuda::set_device(t.device, t.what);
  auto it = streams_.find(t.device);
  if (it == streams_.end()) {
    cudaStream_t s = nullptr;
    KOLO_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), t.what, t.device);
    it = streams_.emplace(t.device, s).first;
  }
  t.own = it->second;
  return t.own;
}

}  // namespace kolo::gpu
