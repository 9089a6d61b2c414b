// Collectives on CUDA memory: what the communicator needs of kolo's GPU parts.
//
// The host-side engine (ordering, the fingerprint check, failure detection,
// the timeline) is the same for every collective; a collective on CUDA
// memory adds two things:
//  - its place in the caller's CUDA stream (issue(), on the caller's thread:
//    the collective reads its input after the work queued there before it,
//    and the work queued there after it waits for its result on the GPU);
//  - a data plane that moves the device bytes (a Plane; today "host": device
//    memory staged through pinned host memory around the host transport).
//
// Built from transport/cuda/*.cc where CMake found the CUDA toolkit
// (KOLO_CUDA), else from transport/cuda/absent.cc, whose functions say kolo
// was built without CUDA.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

#include "kolo/kolo.h"

namespace kolo::gpu {

bool built();

// A buffer a collective names in its errors.
struct Buffer {
  const char* name;  // "input", "output", "data"
  const void* ptr;
  std::size_t bytes;
};

// Throws a kolo::Error naming `what` unless `place` is a CUDA device this
// process can use and each buffer with bytes > 0 is memory of that device.
void check(const char* what, const Place& place, std::initializer_list<Buffer> buffers);

// One collective's place in its caller's stream. Released (the stream may go
// on) when the collective has finished on the GPU, or failed, or was dropped
// unrun: whatever happens, a stream never waits for ever on kolo.
class Ticket {
 public:
  virtual ~Ticket() = default;
};

// A communicator's data plane for CUDA memory (one per communicator, made at
// its first collective on CUDA memory).
class Plane {
 public:
  virtual ~Plane() = default;
  // "host": what Communicator::gpu_transport() reports.
  virtual const char* name() const = 0;
  // Caller's thread, in the order collectives are queued on the engine (the
  // caller holds the communicator's issue lock). `staging_bytes`: the pinned
  // host memory the collective will need (allocated now, on the caller's
  // thread: an allocation that synchronises the device must not wait on a
  // stream that waits on the engine).
  virtual std::shared_ptr<Ticket> issue(const char* what, const Place& place, std::size_t staging_bytes) = 0;
  // Engine thread: copies `in` (in_bytes of device memory, read) to pinned
  // host memory, runs host(host_in, host_out) (the host transport's
  // collective), copies host_out back to `out` (out_bytes, written), then
  // releases the ticket. Overlapping buffers stay overlapping in the copies
  // (in place, allgather's in == out + offset); in_bytes 0: nothing is read.
  // The pinned host memory staged() needs for these buffers (issue()'s staging_bytes).
  static std::size_t staging_bytes(const void* in, std::size_t in_bytes, const void* out, std::size_t out_bytes);
  virtual void staged(Ticket& t, const void* in, std::size_t in_bytes, void* out, std::size_t out_bytes,
                      const std::function<void(const void* host_in, void* host_out)>& host) = 0;
};

// The plane KOLO_GPU_TRANSPORT chooses (core/config.h).
std::unique_ptr<Plane> make_plane();
// What gpu_transport() reports before the first collective on CUDA memory:
// the plane make_plane() will make, or "none" without CUDA.
std::string planned_plane();

}  // namespace kolo::gpu
