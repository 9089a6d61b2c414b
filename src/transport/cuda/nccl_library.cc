#include "transport/cuda/nccl_library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "core/config.h"

namespace kolo::gpu::nccl {

namespace {

constexpr int kOldest = 21000;  // 2.10.0: ncclBfloat16

template <class Fn>
bool resolve(void* handle, const char* name, Fn& fn, std::string& why) {
  fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (fn == nullptr) why = fmt::format("it has no {}", name);
  return fn != nullptr;
}

}  // namespace

std::unique_ptr<Library> load(const std::string& path, std::string& why) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = ::dlerror();
    why = fmt::format("cannot load {}: {}", path, e != nullptr ? e : "unknown error");
    return nullptr;
  }
  auto lib = std::make_unique<Library>();
  lib->path = path;
  Result (*get_version)(int*) = nullptr;
  std::string missing;
  const bool all = resolve(handle, "ncclGetVersion", get_version, missing) &&
                   resolve(handle, "ncclGetUniqueId", lib->get_unique_id, missing) &&
                   resolve(handle, "ncclCommInitRank", lib->comm_init_rank, missing) &&
                   resolve(handle, "ncclCommAbort", lib->comm_abort, missing) &&
                   resolve(handle, "ncclCommDestroy", lib->comm_destroy, missing) &&
                   resolve(handle, "ncclCommGetAsyncError", lib->comm_get_async_error, missing) &&
                   resolve(handle, "ncclGetErrorString", lib->get_error_string, missing) &&
                   resolve(handle, "ncclAllReduce", lib->all_reduce, missing) &&
                   resolve(handle, "ncclBroadcast", lib->broadcast, missing) &&
                   resolve(handle, "ncclAllGather", lib->all_gather, missing) &&
                   resolve(handle, "ncclReduceScatter", lib->reduce_scatter, missing) &&
                   resolve(handle, "ncclSend", lib->send, missing) &&
                   resolve(handle, "ncclRecv", lib->recv, missing) &&
                   resolve(handle, "ncclGroupStart", lib->group_start, missing) &&
                   resolve(handle, "ncclGroupEnd", lib->group_end, missing);
  if (!all) {
    why = fmt::format("{} is not NCCL 2.x: {}", path, missing);
    ::dlclose(handle);
    return nullptr;
  }
  std::string newer;  // what an older library lacks: kolo does without it
  (void)resolve(handle, "ncclCommInitRankConfig", lib->comm_init_rank_config, newer);
  (void)resolve(handle, "ncclCommFinalize", lib->comm_finalize, newer);
  (void)resolve(handle, "ncclGetLastError", lib->get_last_error, newer);
  if (get_version(&lib->version) != kSuccess || lib->version < kOldest) {
    why = fmt::format("{} is NCCL {}; kolo needs 2.10 or newer", path, lib->version);
    ::dlclose(handle);
    return nullptr;
  }
  return lib;  // the handle stays open for the process: the functions point into it
}

const Library* library(std::string& why) {
  static std::mutex mu;
  static std::unique_ptr<Library> lib;
  static std::string failed;
  static bool tried = false;
  std::lock_guard lk(mu);
  if (!tried) {
    tried = true;
    lib = load(config::nccl_library(), failed);
  }
  why = failed;
  return lib.get();
}

}  // namespace kolo::gpu::nccl
