// The "host" data plane for CUDA memory: a collective's device buffers are
// copied to pinned host memory, the host transport (shared memory, TCP, the
// hierarchy) runs the collective there, and the result is copied back. It
// works wherever kolo's host transports do — ranks sharing a GPU, one GPU
// each, several hosts — at the cost of two PCIe (or NVLink-C2C) copies.
//
// Allreduces and broadcasts larger than KOLO_GPU_PART_BYTES move in parts
// (transport/staged_parts.h): every part's download is queued at once, and
// each part's host collective runs as soon as its download has landed, its
// upload queued right after — the copies overlap the host transport.
//
// Pinned memory is allocated at issue, on the caller's thread, grown to the
// next power of two, and only freed with the plane: cudaFreeHost synchronises
// the device, which would wait for a caller's stream that waits for the engine.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/ranges.h"
#include "transport/cuda/caller_stream.h"
#include "transport/cuda/planes.h"
#include "transport/cuda/runtime.h"
#include "transport/staged_parts.h"

namespace kolo::gpu {

namespace {

std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The same start counts too (in place, whatever the sizes).
bool overlapping(const void* a, std::size_t an, const void* b, std::size_t bn) {
  return a == b || overlap(a, an, b, bn);
}

// The pinned bytes a call needs: one block spanning both buffers when they
// overlap (in place, allgather's in == out + offset), so that the host
// collective sees the same relation between them; else both, one after the other.
std::size_t staging_bytes(const Call& c) {
  if (!overlapping(c.in, c.in_bytes, c.out, c.out_bytes)) return aligned(c.in_bytes) + c.out_bytes;
  const auto a = reinterpret_cast<std::uintptr_t>(c.in), b = reinterpret_cast<std::uintptr_t>(c.out);
  return std::max(a + c.in_bytes, b + c.out_bytes) - std::min(a, b);
}

class HostPlane : public Plane {
 public:
  HostPlane() : part_bytes_(static_cast<std::size_t>(std::max<std::int64_t>(config::gpu_part_bytes(), 0))) {}
  ~HostPlane() override {
    streams_.release_all();
    streams_.drain();  // a failed collective may have left copies of the pinned memory queued
    for (char* p : pinned_) (void)cudaFreeHost(p);
    for (auto& [device, events] : landed_)
      for (cudaEvent_t e : events) (void)cudaEventDestroy(e);
  }
  PlaneCode code() const override { return PlaneCode::Host; }

  // The pinned memory first: a ticket whose allocation failed would release
  // its number, and with it every earlier ticket still running (the word the
  // callers' streams wait on only grows).
  std::shared_ptr<Ticket> issue(const Call& call, const Place& place) override {
    const std::size_t need = staging_bytes(call);
    if (need > capacity_ || pinned_.empty()) {
      // Grown to the next power of two: a training loop's sizes settle at once.
      std::size_t want = std::max<std::size_t>(need, 1 << 20);
      want = std::size_t(1) << (64 - __builtin_clzll(want - 1));
      cuda::DeviceScope on(place.device, call.what);
      void* p = nullptr;
      KOLO_CUDA_CHECK(cudaHostAlloc(&p, want, cudaHostAllocPortable), call.what, place.device);
      pinned_.push_back(static_cast<char*>(p));
      capacity_ = want;
    }
    auto t = streams_.issue(call.what, place);
    t->staging = pinned_.back();
    return t;
  }

  void run(Ticket& ticket, const Call& c, const HostLink& host) override {
    auto& t = static_cast<StreamTicket&>(ticket);
    const cudaStream_t s = streams_.start(t);
    char* host_in = t.staging;
    char* host_out = t.staging + aligned(c.in_bytes);
    if (overlapping(c.in, c.in_bytes, c.out, c.out_bytes)) {
      const auto lo = std::min(reinterpret_cast<std::uintptr_t>(c.in), reinterpret_cast<std::uintptr_t>(c.out));
      host_in = t.staging + (reinterpret_cast<std::uintptr_t>(c.in) - lo);
      host_out = t.staging + (reinterpret_cast<std::uintptr_t>(c.out) - lo);
    }
    KOLO_CUDA_CHECK(cudaStreamWaitEvent(s, t.input_ready, 0), t.what, t.device);
    if (host.part && part_bytes_ > 0 && c.out_bytes > part_bytes_) {
      in_parts(t, c, host, s, host_in, host_out);
      t.release();
      return;
    }
    if (c.in_bytes > 0)
      KOLO_CUDA_CHECK(cudaMemcpyAsync(host_in, c.in, c.in_bytes, cudaMemcpyDeviceToHost, s), t.what, t.device);
    cuda::synchronize(s, t.what, t.device);
    host.collective(host_in, host_out);
    if (c.out_bytes > 0)
      KOLO_CUDA_CHECK(cudaMemcpyAsync(c.out, host_out, c.out_bytes, cudaMemcpyHostToDevice, s), t.what, t.device);
    cuda::synchronize(s, t.what, t.device);
    t.release();
  }

 private:
  // The pipeline's stages on this plane's stream: downloads, each followed by
  // an event the engine thread waits on, then the uploads in order.
  void in_parts(StreamTicket& t, const Call& c, const HostLink& host, cudaStream_t s, char* host_in,
                char* host_out) {
    const std::size_t es = dtype_size(c.fp.dtype);
    const Parts parts{c.fp.count, std::max<std::size_t>(part_bytes_ / es, 1)};
    std::vector<cudaEvent_t>& landed = landed_[t.device];  // an event records on its own device's streams only
    while (landed.size() < parts.number()) {
      cudaEvent_t e = nullptr;
      KOLO_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), t.what, t.device);
      landed.push_back(e);
    }
    struct Stages {
      std::vector<cudaEvent_t>& landed;
      StreamTicket& t;
      const Call& c;
      const HostLink& host;
      cudaStream_t s;
      char *host_in, *host_out;
      std::size_t es;
      void download(std::size_t i, std::size_t first, std::size_t n) {
        KOLO_CUDA_CHECK(cudaMemcpyAsync(host_in + first * es, static_cast<const char*>(c.in) + first * es, n * es,
                                        cudaMemcpyDeviceToHost, s),
                        t.what, t.device);
        KOLO_CUDA_CHECK(cudaEventRecord(landed[i], s), t.what, t.device);
      }
      void downloaded(std::size_t i, std::size_t, std::size_t) {
        cuda::synchronize(landed[i], t.what, t.device);
      }
      void collective(std::size_t, std::size_t first, std::size_t n) {
        host.part(host_in + first * es, host_out + first * es, n);
      }
      void upload(std::size_t, std::size_t first, std::size_t n) {
        KOLO_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(c.out) + first * es, host_out + first * es, n * es,
                                        cudaMemcpyHostToDevice, s),
                        t.what, t.device);
      }
      void uploaded() { cuda::synchronize(s, t.what, t.device); }
    } stages{landed, t, c, host, s, host_in, host_out, es};
    run_staged(parts, c.in_bytes > 0, stages);
  }

  // Declared first: destroyed last, after the staging memory, once the
  // streams waiting on its word have been let go.
  CallerStreams streams_;
  std::vector<char*> pinned_;  // every staging block allocated; the last is the current one
  std::size_t capacity_ = 0;   // bytes of the current block
  const std::size_t part_bytes_;        // KOLO_GPU_PART_BYTES (0: never in parts)
  std::map<int, std::vector<cudaEvent_t>> landed_;  // by device, one per part: its download has landed (engine thread)
};

}  // namespace

std::unique_ptr<Plane> make_host_plane() { return std::make_unique<HostPlane>(); }

}  // namespace kolo::gpu
