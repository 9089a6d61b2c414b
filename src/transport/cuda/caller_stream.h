// A collective's place in its caller's CUDA stream, shared by every data plane.
//
// At issue (the caller's thread) an event is recorded on the caller's stream:
// the plane's own stream waits for it before touching the buffers, so the
// collective reads what the work queued before it wrote. Then the caller's
// stream is made to wait, on the GPU, until a 32-bit word in mapped pinned
// memory reaches the collective's ticket number (cuStreamWaitValue32): work
// queued there after the collective runs after it, and the host never blocks.
// The engine writes the ticket once the result is in device memory — or when
// the collective failed or was dropped, so that no stream waits for ever.
// Tickets are numbered in the order collectives are queued on the engine (the
// communicator's issue lock), which runs them in that order, so the word only
// ever grows (cyclically). Where the driver offers no stream memory
// operations (said once in the log), or KOLO_GPU_STREAM_WAIT=0, the result is
// ready after Work::wait() (or the blocking call's return) only. A blocking
// call never makes the stream wait (Place::stream_waits is cleared for it:
// it returns once the result is in device memory), nor does a plane's first
// collective, which sets the plane up (Ticket::complete_before_return).
//
// A run that fails may leave copies or kernels queued on kolo's stream (a
// peer died between two of them, or the caller's earlier work did not end in
// time): the caller's stream then waits for them too (StreamTicket::failed),
// so memory a front frees after the failure is not reused under them.
// A caller's stream being captured into a CUDA graph is refused at issue: a
// graph would replay the event and the ticket's wait, not the collective.
//
// kolo's streams are non-blocking (cudaStreamNonBlocking): the legacy default
// stream, which a caller's stream may be and which waits for every blocking
// stream, must never wait for kolo's, nor kolo's for it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>

#include "transport/gpu.h"

namespace kolo::gpu {

class CallerStreams;

class StreamTicket : public Ticket {
 public:
  StreamTicket(CallerStreams& book, const char* what, int device) : book(book), what(what), device(device) {}
  ~StreamTicket() override;
  // The caller's stream may go on (idempotent).
  void release();
  void failed() noexcept override;

  CallerStreams& book;
  const char* what;
  int device;
  std::uint32_t number = 0;  // 0: the caller's stream does not wait on it
  cudaStream_t caller = nullptr;  // the caller's stream
  cudaStream_t own = nullptr;     // kolo's, once a run has started (CallerStreams::start)
  cudaEvent_t input_ready = nullptr;
  char* staging = nullptr;  // the host plane's pinned memory for this collective
  bool released = false;
};

class CallerStreams {
 public:
  CallerStreams();
  ~CallerStreams();
  CallerStreams(const CallerStreams&) = delete;
  CallerStreams& operator=(const CallerStreams&) = delete;

  // Caller's thread, under the communicator's issue lock. sets_up: the
  // plane's first collective, which makes no stream wait (Ticket::complete_before_return).
  std::shared_ptr<StreamTicket> issue(const char* what, const Place& place, bool sets_up = false);
  // The word reaches `number` (never goes back).
  void release(std::uint32_t number);
  // Every stream may go on (before a plane frees memory: cudaFree and
  // cudaFreeHost synchronise the device).
  void release_all();
  // Waits (KOLO_TIMEOUT_MS at most each; destructors: never throws) until
  // kolo's streams have run what was queued on them: before a plane unmaps or
  // frees memory they may still read.
  void drain();
  // Engine thread, at the start of t's run: makes t's device current (the
  // engine's thread: nothing to put back) and returns kolo's stream on it,
  // made at first use.
  cudaStream_t start(StreamTicket& t);

 private:
  std::uint32_t* flag_ = nullptr;  // mapped pinned memory; the callers' streams wait on it
  std::uint32_t issued_ = 0;       // the last ticket's number (issue lock)
  bool stream_waits_;              // the callers' streams wait (KOLO_GPU_STREAM_WAIT, and
                                   // cuStreamWaitValue32 works here; issue lock)
  std::map<int, cudaStream_t> streams_;  // engine thread
};

}  // namespace kolo::gpu
