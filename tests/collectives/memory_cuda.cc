// check_collectives' buffers in CUDA memory (memory.h). Copies are made on the
// test's own stream, the one the collectives are ordered on, so an upload is
// read by the collective after it and a download waits for the collective.
// Each device buffer lies between two guards of kGuard bytes of a known value
// in its allocation (so kolo also sees buffers that do not start where their
// allocation does): every download checks that no byte of them changed.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "memory.h"

namespace kolo::test {

namespace {

struct Mirror {
  char* device;  // the buffer: its allocation's start + kGuard
  std::size_t bytes;
};

constexpr std::size_t kGuard = 256;  // cudaMalloc's alignment: the buffer stays aligned
constexpr unsigned char kGuardByte = 0xA5;

int g_device = -1;
cudaStream_t g_stream = nullptr;
std::mutex g_mu;
std::map<const char*, Mirror, std::greater<>> g_mirrors;  // by host base, descending: lower_bound finds the owner

void ok(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "test: %s failed: %s\n", call, cudaGetErrorString(e));
  std::exit(1);
}
#define OK(call) ok((call), #call)

const std::pair<const char* const, Mirror>& owner(const char* p) {
  std::lock_guard lk(g_mu);
  auto it = g_mirrors.lower_bound(p);
  if (it == g_mirrors.end() || p > it->first + it->second.bytes) {
    std::fprintf(stderr, "test: %p is in no mirrored buffer\n", static_cast<const void*>(p));
    std::exit(1);
  }
  return *it;
}

}  // namespace

bool use_cuda(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::fprintf(stderr, "skipped: no GPU (no CUDA device can be used in this process)\n");
    return false;
  }
  g_device = device % n;
  OK(cudaSetDevice(g_device));
  OK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  return true;
}

bool on_cuda() { return g_device >= 0; }

Place place() { return on_cuda() ? Place::cuda(g_device, g_stream) : Place::host(); }

void mirror(char* host, std::size_t bytes) {
  if (!on_cuda()) return;
  void* d = nullptr;
  OK(cudaMalloc(&d, bytes + 2 * kGuard));
  OK(cudaMemsetAsync(d, kGuardByte, bytes + 2 * kGuard, g_stream));
  std::lock_guard lk(g_mu);
  g_mirrors[host] = {static_cast<char*>(d) + kGuard, bytes};
}

void forget(char* host) {
  if (!on_cuda()) return;
  Mirror m;
  {
    std::lock_guard lk(g_mu);
    auto it = g_mirrors.find(host);
    if (it == g_mirrors.end()) return;
    m = it->second;
    g_mirrors.erase(it);
  }
  OK(cudaStreamSynchronize(g_stream));
  OK(cudaFree(m.device - kGuard));
}

char* at(char* p) { return const_cast<char*>(at(static_cast<const char*>(p))); }

const char* at(const char* p) {
  if (!on_cuda()) return p;
  const auto& [base, m] = owner(p);
  return m.device + (p - base);
}

void upload(const char* host_base) {
  if (!on_cuda()) return;
  const auto& [base, m] = owner(host_base);
  OK(cudaMemcpyAsync(m.device, base, m.bytes, cudaMemcpyHostToDevice, g_stream));
}

void download(char* host_base) {
  if (!on_cuda()) return;
  const auto& [base, m] = owner(host_base);
  OK(cudaMemcpyAsync(const_cast<char*>(base), m.device, m.bytes, cudaMemcpyDeviceToHost, g_stream));
  unsigned char guards[2 * kGuard];
  OK(cudaMemcpyAsync(guards, m.device - kGuard, kGuard, cudaMemcpyDeviceToHost, g_stream));
  OK(cudaMemcpyAsync(guards + kGuard, m.device + m.bytes, kGuard, cudaMemcpyDeviceToHost, g_stream));
  OK(cudaStreamSynchronize(g_stream));
  for (std::size_t i = 0; i < 2 * kGuard; ++i)
    if (guards[i] != kGuardByte) {
      const bool before = i < kGuard;
      std::fprintf(stderr, "test: kolo wrote outside a buffer of %zu bytes: byte %zu %s it is 0x%02x, not 0x%02x\n",
                   m.bytes, before ? kGuard - i : i - kGuard + 1, before ? "before" : "after", guards[i], kGuardByte);
      std::exit(1);
    }
}

void settle() {
  if (on_cuda()) OK(cudaStreamSynchronize(g_stream));
}

std::string while_captured(const std::function<void()>& call) {
  OK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeRelaxed));
  std::string error;
  try {
    call();
  } catch (const std::exception& e) {
    error = e.what();
  }
  cudaGraph_t graph = nullptr;
  OK(cudaStreamEndCapture(g_stream, &graph));
  if (graph != nullptr) OK(cudaGraphDestroy(graph));
  return error;
}

}  // namespace kolo::test
