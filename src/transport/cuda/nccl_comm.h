// An NCCL communicator that never holds kolo's engine thread for ever.
//
// A blocking NCCL communicator blocks its caller in ncclCommInitRank until
// every rank has joined, and in the first collectives while they set up their
// connections: a peer that died between the unique id's exchange and its own
// init, or before a first collective, leaves the caller blocked in NCCL's
// bootstrap with nothing to abort (the engine's deadlines and failure checks
// run on that very thread). NCCL's non-blocking mode (ncclCommInitRankConfig
// with blocking = 0, NCCL 2.14 and later) returns from every call at once —
// ncclInProgress while the work goes on in NCCL's own threads — so kolo polls
// ncclCommGetAsyncError against its deadline and aborts the communicator when
// it passes, which stops NCCL's threads and kernels. The price: NCCL runs each
// call of such a communicator on a thread of its own (tens of microseconds),
// where the data it moves (the nccl plane's collectives) costs far more.
// Libraries older than 2.14 get a blocking communicator and said risk.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "transport/cuda/nccl_library.h"

namespace kolo::gpu::nccl {

// Forms this rank's communicator of `size` ranks from rank 0's `id`: on
// NCCL ≥ 2.14 a non-blocking one, polled until formed. Returns kSuccess with
// *comm set; else *comm is null and the result is NCCL's error, or
// kInProgress when `limit` passed first (the half-formed communicator was
// aborted). *nonblocking says which kind was made.
// `between` runs between polls and may throw (a peer known lost): the
// communicator is then aborted and the exception goes on.
Result form(const Library& lib, Comm* comm, int size, const UniqueId& id, int rank, std::chrono::milliseconds limit,
            bool* nonblocking, const std::function<void()>& between = {});

// Until the calls made on a non-blocking communicator so far have been carried
// out (their kernels queued on their streams: only then may kolo queue work
// after them or wait for the stream), at most `limit`. Returns kSuccess, NCCL's
// error, or kInProgress when the limit passed; the caller aborts on either.
// `between` runs between polls and may throw.
Result settle(const Library& lib, Comm comm, std::chrono::milliseconds limit,
              const std::function<void()>& between = {});

// Lets a communicator go whose collectives have all completed: finalized and
// destroyed; aborted where finalizing fails or outlasts `limit` (a peer gone).
void finish(const Library& lib, Comm comm, bool nonblocking, std::chrono::milliseconds limit) noexcept;

// NCCL's words for `r`, with the library's last error message where it has one
// (ncclGetLastError: which CUDA call or peer failed).
std::string describe(const Library& lib, Result r);

}  // namespace kolo::gpu::nccl
