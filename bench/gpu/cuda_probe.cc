// What kolo's GPU parts assume of the CUDA driver, asked of the GPU machine's
// in a few seconds (the first step of tests/gpu/run-on-device.sh), so that the
// questions docs/gpus.md leaves open until a GPU has run kolo are answered by
// the first run, whatever else it reaches:
//  - do the stream memory operations work, and how soon does a stream waiting
//    on kolo's ticket word go on once the host writes it;
//  - which CUDA calls block while a stream waits on such a word (kolo's engine
//    thread makes some while a caller's stream waits on a ticket: one that
//    waits for the whole device would never return) — with the caller's
//    stream the legacy default stream (torch's) and a non-blocking one;
//  - the costs behind a small collective's latency: an 8-byte copy, kolo's
//    reduction kernel, an event, a CUDA IPC open and close;
//  - what a peer that maps an allocation sees after its owner frees it (the
//    ipc plane's direct allreduce keeps peers' buffers mapped).
// One line per answer; it never hangs: a call still blocked after 1 s is
// reported, and the word it may wait behind is written to let it go.
//
//   build/bench/gpu/cuda_probe          (exit 77 without a GPU)
//
// It starts itself again (--exporter) as a second process that lends it
// device memory through CUDA IPC, as a peer rank does.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "kernels/reduce_cuda.h"
#include "transport/cuda/runtime.h"
#include "../../tests/common/cuda_main.h"

using namespace kolo;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kBytes = 4u << 20;  // each lent buffer
constexpr int kBuffers = 4;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string hex(const void* p, std::size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    const auto b = static_cast<const unsigned char*>(p)[i];
    s += d[b >> 4];
    s += d[b & 15];
  }
  return s;
}

void unhex(const std::string& s, void* p) {
  auto v = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (std::size_t i = 0; i + 1 < s.size(); i += 2)
    static_cast<unsigned char*>(p)[i / 2] = static_cast<unsigned char>(v(s[i]) * 16 + v(s[i + 1]));
}

// ---- the second process: lends kBuffers buffers, frees and allocates on request

int exporter() {
  test::cuda_ok(cudaSetDevice(0), "exporter: cudaSetDevice");
  std::vector<void*> buf(kBuffers);
  for (int i = 0; i < kBuffers; ++i) {
    test::cuda_ok(cudaMalloc(&buf[i], kBytes), "exporter: cudaMalloc");
    test::cuda_ok(cudaMemset(buf[i], 0x10 + i, kBytes), "exporter: cudaMemset");
    cudaIpcMemHandle_t h;
    test::cuda_ok(cudaIpcGetMemHandle(&h, buf[i]), "exporter: cudaIpcGetMemHandle");
    std::printf("%s\n", hex(&h, sizeof h).c_str());
  }
  test::cuda_ok(cudaDeviceSynchronize(), "exporter: cudaDeviceSynchronize");
  std::fflush(stdout);
  char line[256];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    int i = 0;
    if (std::sscanf(line, "free %d", &i) == 1) {
      std::printf("%s\n", cudaGetErrorName(cudaFree(buf[i])));
    } else if (std::sscanf(line, "alloc %d", &i) == 1) {
      void* p = nullptr;
      test::cuda_ok(cudaMalloc(&p, kBytes), "exporter: cudaMalloc");
      test::cuda_ok(cudaMemset(p, 0x77, kBytes), "exporter: cudaMemset");
      test::cuda_ok(cudaDeviceSynchronize(), "exporter: cudaDeviceSynchronize");
      cudaIpcMemHandle_t h;
      test::cuda_ok(cudaIpcGetMemHandle(&h, p), "exporter: cudaIpcGetMemHandle");
      std::printf("%d %s\n", p == buf[i] ? 1 : 0, hex(&h, sizeof h).c_str());
      buf[i] = p;
    } else {
      break;
    }
    std::fflush(stdout);
  }
  return 0;
}

struct Peer {
  FILE* to = nullptr;
  FILE* from = nullptr;
  std::vector<cudaIpcMemHandle_t> handles;

  bool start(const char* self) {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) return false;
    if (fork() == 0) {
      dup2(down[0], 0);
      dup2(up[1], 1);
      close(down[1]);
      close(up[0]);
      execl(self, self, "--exporter", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(down[0]);
    close(up[1]);
    to = fdopen(down[1], "w");
    from = fdopen(up[0], "r");
    for (int i = 0; i < kBuffers; ++i) {
      const std::string l = line();
      if (l.size() < 2 * sizeof(cudaIpcMemHandle_t)) return false;
      cudaIpcMemHandle_t h;
      unhex(l, &h);
      handles.push_back(h);
    }
    return true;
  }
  std::string ask(const std::string& what) {
    std::fprintf(to, "%s\n", what.c_str());
    std::fflush(to);
    return line();
  }
  std::string line() {
    char buf[512];
    if (std::fgets(buf, sizeof buf, from) == nullptr) return {};
    std::string s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
  }
};

// A word in mapped pinned memory that a stream can be made to wait on.
struct Word {
  std::uint32_t* p = nullptr;
  std::uint32_t next = 0;
  gpu::cuda::WaitValue32 wait = nullptr;
  Word() {
    void* m = nullptr;
    test::cuda_ok(cudaHostAlloc(&m, sizeof(std::uint32_t), cudaHostAllocMapped | cudaHostAllocPortable),
                  "cudaHostAlloc");
    p = static_cast<std::uint32_t*>(m);
    *p = 0;
    wait = gpu::cuda::wait_value32();  // as kolo's planes take it
  }
  // Stream s waits until the word is written (the next value); false if it cannot.
  bool hold(cudaStream_t s) {
    if (wait == nullptr) return false;
    return wait(s, reinterpret_cast<std::uintptr_t>(p), ++next, gpu::cuda::kWaitGeq) == 0;
  }
  void let_go() { std::atomic_ref<std::uint32_t>(*p).store(next, std::memory_order_release); }
};

// Runs fn on a thread while `s` waits on the word: "returns" with its time,
// or "BLOCKS" if still running after 1 s (the word is then written; whether
// it returned after that is said too).
void while_held(Word& w, cudaStream_t s, const char* name, const std::function<cudaError_t()>& fn) {
  if (!w.hold(s)) {
    std::printf("  %-44s (the stream cannot wait on a word here)\n", name);
    return;
  }
  auto task = std::make_shared<std::packaged_task<cudaError_t()>>(fn);
  auto done = task->get_future();
  const auto t0 = Clock::now();
  std::thread([task] { (*task)(); }).detach();
  if (done.wait_for(std::chrono::seconds(1)) == std::future_status::ready) {
    const double us = us_since(t0);
    w.let_go();
    std::printf("  %-44s returns: %s, %.0f us\n", name, cudaGetErrorName(done.get()), us);
  } else {
    w.let_go();
    const bool after = done.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
    std::printf("  %-44s BLOCKS while the stream waits (%s once the word was written)\n", name,
                after ? "returned" : "still blocked 5 s");
  }
  (void)cudaStreamSynchronize(s);
  (void)cudaGetLastError();
}

void blocking_calls(Word& w, cudaStream_t s, Peer& peer) {
  // Static: a call still blocked when this returns keeps using them.
  static void* dev = nullptr;
  static void* host = nullptr;
  static cudaStream_t other = nullptr;
  static void* mapped = nullptr;
  test::cuda_ok(cudaMalloc(&dev, 1 << 20), "cudaMalloc");
  test::cuda_ok(cudaHostAlloc(&host, 1 << 20, cudaHostAllocPortable), "cudaHostAlloc");
  test::cuda_ok(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), "cudaStreamCreate");
  mapped = nullptr;
  while_held(w, s, "cudaEventCreate + cudaEventDestroy", [] {
    cudaEvent_t e;
    const cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    return r == cudaSuccess ? cudaEventDestroy(e) : r;
  });
  while_held(w, s, "cudaStreamCreate (non-blocking)", [] {
    cudaStream_t n;
    return cudaStreamCreateWithFlags(&n, cudaStreamNonBlocking);
  });
  while_held(w, s, "copy + query on a non-blocking stream", [&] {
    cudaError_t r = cudaMemcpyAsync(dev, static_cast<char*>(dev) + 4096, 8, cudaMemcpyDeviceToDevice, other);
    while (r == cudaSuccess && (r = cudaStreamQuery(other)) == cudaErrorNotReady) std::this_thread::yield();
    return r;
  });
  while_held(w, s, "cudaIpcGetMemHandle", [&] {
    cudaIpcMemHandle_t h;
    return cudaIpcGetMemHandle(&h, dev);
  });
  while_held(w, s, "cudaIpcOpenMemHandle (a peer's buffer)", [&] {
    return cudaIpcOpenMemHandle(&mapped, peer.handles[0], cudaIpcMemLazyEnablePeerAccess);
  });
  if (mapped != nullptr) while_held(w, s, "cudaIpcCloseMemHandle", [&] { return cudaIpcCloseMemHandle(mapped); });
  while_held(w, s, "cudaMalloc (1 MiB)", [] {
    void* p;
    return cudaMalloc(&p, 1 << 20);
  });
  while_held(w, s, "cudaHostAlloc (1 MiB)", [] {
    void* p;
    return cudaHostAlloc(&p, 1 << 20, cudaHostAllocPortable);
  });
  while_held(w, s, "cudaFreeHost", [&] { return cudaFreeHost(host); });
  while_held(w, s, "cudaFree", [&] { return cudaFree(dev); });
}

// The first 4 bytes of device memory at p, as a string ("11111111" or the error).
std::string first_bytes(const void* p, cudaStream_t s) {
  unsigned char b[4] = {};
  cudaError_t r = cudaMemcpyAsync(b, p, sizeof b, cudaMemcpyDeviceToHost, s);
  if (r == cudaSuccess) r = cudaStreamSynchronize(s);
  if (r != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaGetErrorName(r);
  }
  return hex(b, sizeof b);
}

void free_before_close(Peer& peer, cudaStream_t s) {
  void* m = nullptr;
  cudaError_t r = cudaIpcOpenMemHandle(&m, peer.handles[2], cudaIpcMemLazyEnablePeerAccess);
  if (r != cudaSuccess) {
    std::printf("  cannot open the peer's buffer: %s\n", cudaGetErrorName(r));
    return;
  }
  std::printf("  mapped, before the owner frees it:         %s (12121212 expected)\n", first_bytes(m, s).c_str());
  std::printf("  the owner's cudaFree:                      %s\n", peer.ask("free 2").c_str());
  std::printf("  the mapping after the free:                %s\n", first_bytes(m, s).c_str());
  const std::string fresh = peer.ask("alloc 2");
  std::printf("  the owner allocates again (same address: %c), filled with 77\n", fresh.empty() ? '?' : fresh[0]);
  std::printf("  the old mapping now reads:                 %s\n", first_bytes(m, s).c_str());
  r = cudaIpcCloseMemHandle(m);
  std::printf("  closing the old mapping:                   %s\n", cudaGetErrorName(r));
  if (fresh.size() > 2) {
    cudaIpcMemHandle_t h;
    unhex(fresh.substr(2), &h);
    void* n = nullptr;
    r = cudaIpcOpenMemHandle(&n, h, cudaIpcMemLazyEnablePeerAccess);
    std::printf("  the new allocation, mapped anew:           %s\n",
                r == cudaSuccess ? first_bytes(n, s).c_str() : cudaGetErrorName(r));
    if (r == cudaSuccess) (void)cudaIpcCloseMemHandle(n);
  }
  (void)cudaGetLastError();
}

// Median time (us) of fn(), then until stream s has run it (polled).
double queued_us(cudaStream_t s, const std::function<void()>& fn, int reps = 500) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    while (cudaStreamQuery(s) == cudaErrorNotReady) {
    }
    t.push_back(us_since(t0));
  }
  return median(t);
}

void costs(Word& w, cudaStream_t s, Peer& peer) {
  float* d = nullptr;
  test::cuda_ok(cudaMalloc(reinterpret_cast<void**>(&d), 4096), "cudaMalloc");
  test::cuda_ok(cudaMemset(d, 0, 4096), "cudaMemset");
  std::printf("  8-byte device copy, queued and polled to completion: %.1f us\n", queued_us(s, [&] {
                (void)cudaMemcpyAsync(d, d + 64, 8, cudaMemcpyDeviceToDevice, s);
              }));
  kernels::cuda::Inputs in;
  in.n = 2;
  in.in[0] = d + 128;
  in.in[1] = d + 256;
  std::printf("  kolo's reduction kernel, 2 x 2 f32, queued and polled: %.1f us\n", queued_us(s, [&] {
                (void)kernels::cuda::reduce(DType::F32, Op::Sum, in, d, 2, 0, s);
              }));
  cudaEvent_t e;
  test::cuda_ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  std::printf("  event record + stream wait + 8-byte copy, polled: %.1f us\n", queued_us(s, [&] {
                (void)cudaEventRecord(e, s);
                (void)cudaStreamWaitEvent(s, e, 0);
                (void)cudaMemcpyAsync(d, d + 64, 8, cudaMemcpyDeviceToDevice, s);
              }));
  std::vector<double> create;
  for (int i = 0; i < 500; ++i) {
    const auto t0 = Clock::now();
    cudaEvent_t x;
    (void)cudaEventCreateWithFlags(&x, cudaEventDisableTiming);
    (void)cudaEventRecord(x, s);
    create.push_back(us_since(t0));
    (void)cudaEventDestroy(x);
  }
  std::printf("  cudaEventCreate + record (each collective's issue): %.1f us\n", median(create));
  if (w.wait != nullptr) {
    // The ticket word: from the host's write to the stream's next event.
    std::vector<double> t;
    for (int i = 0; i < 200; ++i) {
      w.hold(s);
      (void)cudaEventRecord(e, s);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      const auto t0 = Clock::now();
      w.let_go();
      while (cudaEventQuery(e) == cudaErrorNotReady) {
      }
      t.push_back(us_since(t0));
    }
    std::printf("  a waiting stream goes on after the word is written: %.1f us\n", median(t));
  }
  std::vector<double> open, close;
  for (int i = 0; i < 20; ++i) {
    void* m = nullptr;
    auto t0 = Clock::now();
    if (cudaIpcOpenMemHandle(&m, peer.handles[3], cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) break;
    open.push_back(us_since(t0));
    t0 = Clock::now();
    (void)cudaIpcCloseMemHandle(m);
    close.push_back(us_since(t0));
  }
  if (!open.empty())
    std::printf("  CUDA IPC open of a peer's buffer: %.0f us, close: %.0f us\n", median(open), median(close));
  (void)cudaGetLastError();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--exporter") == 0) return exporter();
  test::exit_77_without_gpu();
  test::cuda_ok(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  test::cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  std::printf("cuda_probe: %s, driver %d, runtime %d\n", prop.name, driver, runtime);
  std::fflush(stdout);
  Peer peer;
  if (!peer.start("/proc/self/exe")) {
    std::printf("the exporter process did not start (or lend its buffers): no CUDA IPC here?\n");
    return 1;
  }
  Word w;
  std::printf("stream memory operations (cuStreamWaitValue32): %s\n", w.wait ? "offered" : "NOT offered");
  cudaStream_t mine = nullptr;
  test::cuda_ok(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking), "cudaStreamCreate");
  std::printf("calls made while the legacy default stream (torch's) waits on a ticket word:\n");
  blocking_calls(w, cudaStreamLegacy, peer);
  std::printf("calls made while a non-blocking stream waits on a ticket word:\n");
  blocking_calls(w, mine, peer);
  std::printf("costs:\n");
  costs(w, mine, peer);
  // Last: reading freed memory may leave this process's context unusable.
  std::printf("a peer's allocation freed while mapped here:\n");
  free_before_close(peer, mine);
  peer.ask("quit");
  std::fflush(stdout);
  // A call reported as still blocked may hold a thread: leave without waiting for it.
  _exit(0);
}
