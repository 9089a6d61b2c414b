#include "transport/cuda/nccl_comm.h"

#include <fmt/format.h>

#include "transport/cuda/runtime.h"

namespace kolo::gpu::nccl {

Result settle(const Library& lib, Comm comm, std::chrono::milliseconds limit, const std::function<void()>& between) {
  Result state = kInProgress;
  // cuda::poll's pace (a spin, then 50 µs sleeps) for NCCL's state: "not ready" while in progress.
  (void)cuda::poll(
      [&] {
        Result async = kSuccess;
        const Result call = lib.comm_get_async_error(comm, &async);
        state = call != kSuccess ? call : async;
        return state == kInProgress ? cudaErrorNotReady : cudaSuccess;
      },
      limit, between);
  return state;
}

Result form(const Library& lib, Comm* comm, int size, const UniqueId& id, int rank, std::chrono::milliseconds limit,
            bool* nonblocking, const std::function<void()>& between) {
  *comm = nullptr;
  *nonblocking = lib.comm_init_rank_config != nullptr && lib.comm_finalize != nullptr;
  if (!*nonblocking) {
    const Result r = lib.comm_init_rank(comm, size, id, rank);
    if (r != kSuccess) *comm = nullptr;
    return r;
  }
  Config config;
  config.blocking = 0;
  Comm c = nullptr;
  Result r = lib.comm_init_rank_config(&c, size, id, rank, &config);
  if (c == nullptr) return r == kSuccess || r == kInProgress ? kInternalError : r;
  try {
    if (r == kSuccess || r == kInProgress) r = settle(lib, c, limit, between);
  } catch (...) {
    (void)lib.comm_abort(c);
    throw;
  }
  if (r != kSuccess) {
    (void)lib.comm_abort(c);
    return r;
  }
  *comm = c;
  return kSuccess;
}

void finish(const Library& lib, Comm comm, bool nonblocking, std::chrono::milliseconds limit) noexcept {
  if (comm == nullptr) return;
  if (nonblocking) {
    // Finalizing flushes NCCL's own pending work and may wait on peers: bounded.
    Result r = lib.comm_finalize(comm);
    if (r == kSuccess || r == kInProgress) r = settle(lib, comm, limit);
    if (r != kSuccess) {
      (void)lib.comm_abort(comm);
      return;
    }
  }
  (void)lib.comm_destroy(comm);
}

std::string describe(const Library& lib, Result r) {
  std::string words = lib.get_error_string(r);
  const char* last = lib.get_last_error != nullptr ? lib.get_last_error(nullptr) : nullptr;
  if (last != nullptr && *last != '\0') words += fmt::format(" (NCCL's last error: {})", last);
  return words;
}

}  // namespace kolo::gpu::nccl
