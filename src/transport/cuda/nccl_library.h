// NCCL, loaded at run time (dlopen): a kolo build needs neither NCCL's
// headers nor its library, and a machine without it still runs every other
// data plane. The few declarations kolo uses are NCCL's C ABI as nccl.h
// (2.x) defines it — stable since NCCL 2.0; ncclBfloat16 since 2.10, the oldest
// release kolo accepts.
#pragma once

#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <memory>
#include <string>

namespace kolo::gpu::nccl {

using Result = int;  // ncclResult_t: 0 success, 3 internal error, 7 in progress
inline constexpr Result kSuccess = 0;
inline constexpr Result kInternalError = 3;
inline constexpr Result kInProgress = 7;
using Comm = struct ncclComm*;  // ncclComm_t
struct UniqueId {
  char internal[128];  // NCCL_UNIQUE_ID_BYTES
};
// ncclDataType_t and ncclRedOp_t values.
enum DataType : int { kInt8 = 0, kUint8 = 1, kInt32 = 2, kInt64 = 4, kFloat16 = 6, kFloat32 = 7, kFloat64 = 8,
                      kBfloat16 = 9 };
enum RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3 };  // kolo divides for Average itself

// ncclConfig_t as NCCL 2.14 laid it out. NCCL copies `size` bytes of a config
// and gives every field its `version` predates the default, so each later
// release takes this one (tests/gpu/nccl_library_test.cc checks the layout
// against the toolkit's nccl.h).
inline constexpr int kUndefined = INT_MIN;  // NCCL_CONFIG_UNDEF_INT
struct Config {
  std::size_t size = sizeof(Config);
  unsigned magic = 0xcafebeef;
  unsigned version = 21400;  // NCCL_VERSION(2, 14, 0)
  int blocking = kUndefined;
  int tail = kUndefined;     // the struct's padding in 2.14, cgaClusterSize's place since 2.17
};

// The functions kolo calls, resolved from the library.
struct Library {
  int version = 0;  // ncclGetVersion: major * 10000 + minor * 100 + patch
  std::string path;
  Result (*get_unique_id)(UniqueId*) = nullptr;
  Result (*comm_init_rank)(Comm*, int, UniqueId, int) = nullptr;
  Result (*comm_abort)(Comm) = nullptr;
  Result (*comm_destroy)(Comm) = nullptr;
  Result (*comm_get_async_error)(Comm, Result*) = nullptr;
  const char* (*get_error_string)(Result) = nullptr;
  Result (*all_reduce)(const void*, void*, std::size_t, int, int, Comm, cudaStream_t) = nullptr;
  Result (*broadcast)(const void*, void*, std::size_t, int, int, Comm, cudaStream_t) = nullptr;
  Result (*all_gather)(const void*, void*, std::size_t, int, Comm, cudaStream_t) = nullptr;
  Result (*reduce_scatter)(const void*, void*, std::size_t, int, int, Comm, cudaStream_t) = nullptr;
  Result (*send)(const void*, std::size_t, int, int, Comm, cudaStream_t) = nullptr;
  Result (*recv)(void*, std::size_t, int, int, Comm, cudaStream_t) = nullptr;
  Result (*group_start)() = nullptr;
  Result (*group_end)() = nullptr;
  // Null where the library predates them.
  Result (*comm_init_rank_config)(Comm*, int, UniqueId, int, Config*) = nullptr;  // 2.14
  Result (*comm_finalize)(Comm) = nullptr;                                         // 2.14
  const char* (*get_last_error)(Comm) = nullptr;                                   // 2.13
};

// The library KOLO_NCCL_LIBRARY names (default libnccl.so.2: the one a
// framework already loaded into the process, or the loader's search path),
// loaded once per process; null when it cannot be used, with the reason in
// `why` (not found, a symbol missing, older than 2.10).
const Library* library(std::string& why);

// Loads the library at `path` (library() keeps the configured one for the
// process; its handle is never closed). Exposed for the tests: a missing
// file, and the CUDA toolkit's real library.
std::unique_ptr<Library> load(const std::string& path, std::string& why);

}  // namespace kolo::gpu::nccl
