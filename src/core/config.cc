#include "core/config.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace kolo::config {

std::int64_t env_int(const char* name, std::int64_t def) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0') fail("{}={} is not an integer", name, v);
  return x;
}

std::string env_str(const char* name, const std::string& def) {
  const char* v = std::getenv(name);
  return (v == nullptr || *v == '\0') ? def : std::string(v);
}

bool is_set(const char* name) { return !env_str(name, "").empty(); }

std::optional<std::string> env_var(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::vector<std::string> environment() {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) out.emplace_back(*e);
  return out;
}

PortRange port_range() {
  const std::string v = env_str("KOLO_PORT_RANGE", "");
  if (v.empty()) return {};
  PortRange r;
  char dash = 0, rest = 0;
  if (std::sscanf(v.c_str(), "%d%c%d%c", &r.lo, &dash, &r.hi, &rest) != 3 || dash != '-' || r.lo < 1 ||
      r.hi > 65535 || r.lo > r.hi)
    fail("KOLO_PORT_RANGE={} is not a port range LO-HI with 1 <= LO <= HI <= 65535", v);
  return r;
}

std::vector<Setting> job_wide_settings() {
  auto num = [](std::int64_t v) { return std::to_string(v); };
  return {
      {"KOLO_TRANSPORT", transport()},
      {"KOLO_GPU_TRANSPORT", gpu_transport()},
      {"KOLO_GPU_PART_BYTES", num(gpu_part_bytes())},
      {"KOLO_GPU_IPC_BYTES", num(gpu_ipc_bytes())},
      {"KOLO_GPU_IPC_SHARDED_BYTES", num(gpu_ipc_sharded_bytes())},
      {"KOLO_GPU_IPC_DIRECT_BYTES", num(gpu_ipc_direct_bytes())},
      {"KOLO_HIERARCHICAL", hierarchical() ? "1" : "0"},
      {"KOLO_SHM_CHUNK", num(shm_chunk_bytes())},
      {"KOLO_RING_SEGMENT", num(ring_segment_bytes())},
      {"KOLO_HIER_SEGMENT", num(hier_segment_bytes())},
      {"KOLO_ALLREDUCE_SMALL", num(allreduce_small_bytes())},
      {"KOLO_ALLREDUCE_ALGO", allreduce_algo()},
      {"KOLO_VERIFY_CALLS", verify_calls() ? "1" : "0"},
      {"KOLO_NAMED_CACHE", num(named_cache_capacity())},  // every rank's name table must evict alike
      {"KOLO_FUSION_THRESHOLD", num(fusion_threshold())},  // the reducer's buckets must match
      // autotune's agreement is a collective at the same steps on every rank
      {"KOLO_AUTOTUNE", autotune() ? "1" : "0"},
      {"KOLO_AUTOTUNE_WARMUP_STEPS", num(autotune_warmup_steps())},
      {"KOLO_AUTOTUNE_STEPS", num(autotune_steps())},
  };
}

}  // namespace kolo::config
