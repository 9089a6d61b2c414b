// A rank of the security job tests: kolo::init(), a few allreduces checked
// against the expected sums, a barrier; prints "secure_rank R ok" or the
// error, and exits 0 or 1. Hooks for the test script (all optional):
//   SECURE_INFO_FILE   rank 0 writes "KOLO_STORE_ADDR KOLO_SECRET" there
//                      before init (how the script learns kolorun's secret)
//   SECURE_GO_FILE     the rank in SECURE_WAIT_RANK waits for this file to
//                      exist before init, so that the others sit in the
//                      mesh's accept loop while intruders knock
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kolo/kolo.h"

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int rank_from_env() {
  for (const char* n : {"KOLO_RANK", "RANK"})
    if (!env(n).empty()) return std::atoi(env(n).c_str());
  return 0;
}

}  // namespace

int main() {
  const int rank = rank_from_env();
  if (rank == 0 && !env("SECURE_INFO_FILE").empty()) {
    const std::string path = env("SECURE_INFO_FILE");
    {
      std::ofstream f(path + ".tmp");
      f << env("KOLO_STORE_ADDR") << ' ' << env("KOLO_SECRET") << '\n';
    }
    std::rename((path + ".tmp").c_str(), path.c_str());
  }
  if (!env("SECURE_GO_FILE").empty() && std::to_string(rank) == env("SECURE_WAIT_RANK")) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (::access(env("SECURE_GO_FILE").c_str(), F_OK) != 0) {
      if (std::chrono::steady_clock::now() > until) {
        std::fprintf(stderr, "secure_rank %d: no go file after 120 s\n", rank);
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  try {
    kolo::Communicator comm = kolo::init();
    const int n = comm.size();
    const std::int64_t want = std::int64_t(n) * (n + 1) / 2;
    for (int iter = 0; iter < 5; ++iter) {
      std::vector<std::int64_t> v(1000 + iter * 100000, comm.rank() + 1);
      comm.allreduce(v.data(), v.size(), kolo::Op::Sum);
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] != want) {
          std::fprintf(stderr, "secure_rank %d: element %zu is %lld, want %lld\n", comm.rank(), i,
                       static_cast<long long>(v[i]), static_cast<long long>(want));
          return 1;
        }
      }
    }
    comm.barrier();
    std::printf("secure_rank %d ok transport=%s sum=%lld\n", comm.rank(), comm.transport().c_str(),
                static_cast<long long>(want));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "secure_rank %d error: %s\n", rank, e.what());
    return 1;
  }
}
