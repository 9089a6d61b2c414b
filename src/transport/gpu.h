// Collectives on CUDA memory: what the communicator needs of kolo's GPU parts.
//
// The host-side engine (ordering, the fingerprint check, failure detection,
// the timeline) is the same for every collective; a collective on CUDA
// memory adds two things:
//  - its place in the caller's CUDA stream (Plane::issue(), on the caller's
//    thread: the collective reads its input after the work queued there
//    before it, and the work queued there after it waits for its result on
//    the GPU; transport/cuda/caller_stream.h);
//  - a data plane that moves the device bytes (Plane::run(), on the engine
//    thread): "host" (device memory staged through pinned host memory around
//    the host transport: any ranks, any hosts) or "ipc" (ranks of one host
//    read each other's device memory through CUDA IPC; kolo's own reduction
//    kernels).
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
#include <vector>

#include "core/fingerprint.h"
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

// A collective on device memory, as a data plane sees it.
struct Call {
  const char* what;
  Fingerprint fp;  // kind, dtype, op (Average as the caller gave it), root, count (allgatherv: the total)
  std::vector<std::size_t> counts;  // allgatherv: elements of each rank
  const void* in;         // device memory read: in_bytes from in (broadcast's non-roots: 0)
  std::size_t in_bytes;
  void* out;              // device memory written: out_bytes from out
  std::size_t out_bytes;
};

// What a plane may ask of the communicator's host transport, inside the
// collective (all ranks run the same plane code, so these line up).
struct HostLink {
  int rank;
  int size;
  std::function<void()> barrier;
  // Every rank's `bytes` bytes, in rank order.
  std::function<void(const void* mine, void* all, std::size_t bytes)> allgather;
  // The collective itself on host buffers laid out as the device ones.
  std::function<void(const void* in, void* out)> collective;
  // The same collective on `count` of its elements (a part of the whole;
  // transport/staged_parts.h): allreduce and broadcast, empty for the others.
  std::function<void(const void* in, void* out, std::size_t count)> part;
  // Fails, naming it, where a peer is known to have failed or gone (its
  // process died, its connection closed); never blocks: for a plane that
  // waits on something other than the host transport (NCCL's kernels).
  std::function<void()> check_peers;
};

// One collective's place in its caller's stream (caller_stream.h). Released
// (the stream may go on) when the collective has finished on the GPU, or
// failed, or was dropped unrun: a stream never waits for ever on kolo.
class Ticket {
 public:
  virtual ~Ticket() = default;
  // The collective that sets its plane up (maps the peers' memory, forms
  // NCCL's communicator: CUDA calls that may synchronise the device) makes no
  // stream wait on it, which the engine could then never release; an
  // asynchronous call of it returns only once it has completed, so work the
  // caller queues after it is still ordered after it.
  bool complete_before_return = false;
  // Engine thread, when run() threw: copies or kernels it queued may still
  // run, so the caller's stream is made to wait for them before it goes on —
  // memory the fronts let go of after the failure is reused there only once
  // kolo's queued work has stopped touching it.
  virtual void failed() noexcept {}
};

// A communicator's data plane for CUDA memory (one per communicator, made at
// its first collective on CUDA memory).
class Plane {
 public:
  virtual ~Plane() = default;
  // Which plane this is: its fingerprint code, and through it the name
  // ("host", "ipc", "nccl") that Communicator::gpu_transport() reports.
  virtual PlaneCode code() const = 0;
  const char* name() const { return plane_name(code()); }
  // Caller's thread, in the order collectives are queued on the engine (the
  // caller holds the communicator's issue lock). Memory the collective will
  // need is allocated here, on the caller's thread: an allocation that
  // synchronises the device must not wait on a stream that waits on the engine.
  virtual std::shared_ptr<Ticket> issue(const Call& call, const Place& place) = 0;
  // Engine thread, after the fingerprint check: moves the data, then releases the ticket.
  virtual void run(Ticket& t, const Call& call, const HostLink& host) = 0;
};

// A plane's last word, from its destructor: tells the other ranks this rank
// no longer maps any of their memory, and waits (KOLO_PEER_TIMEOUT_MS at
// most) until every rank has said the same; false if one has not (gone, late,
// or the communicator failed). Memory that peers mapped is freed only after
// it returns true — CUDA calls freeing memory a peer still maps undefined —
// and else left allocated until the process exits.
using Farewell = std::function<bool()>;

// The plane KOLO_GPU_TRANSPORT chooses (core/config.h) for a communicator of
// `size` ranks, all on one host or not.
std::unique_ptr<Plane> make_plane(int size, bool one_host, Farewell farewell);
// What gpu_transport() reports before the first collective on CUDA memory:
// the plane make_plane() would make, or "none" without CUDA.
std::string planned_plane(int size, bool one_host);

// The gradient reducer's fusion buffers on a CUDA device (reducer/
// fusion_copy.h): memory of place.device, zeroed; and copies, casts and
// scaling queued on place.stream, so they are ordered with the caller's
// kernels and the bucket's allreduce on the same stream.
std::shared_ptr<void> allocate(std::size_t bytes, const Place& place);
void convert(void* dst, DType dt, const void* src, DType st, std::size_t count, double scale,
             const Place& place);
void zero(void* dst, std::size_t bytes, const Place& place);

}  // namespace kolo::gpu
