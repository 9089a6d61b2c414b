// The cache tests' rank program (no LibTorch): builds a cache of the
// synthetic data set under kolorun, or opens one and prints what it holds.
//
//   cache_rank_prog build PATH [--samples N] [--transform NAME] [--inputs X] [--variable]
//                              [--chunk C] [--force] [--kill-rank R --kill-at I] [--throw-at I]
//                              [--outlive-sigterm]
//   cache_rank_prog check PATH [--samples N] [--transform NAME] [--variable] [--expect-transform NAME]
//
// build prints "built: <reason>" or "reused" on rank 0. --kill-at makes rank
// R SIGKILL itself when it reaches sample I; --throw-at makes the transform
// throw there. --outlive-sigterm ignores SIGTERM, so that a rank whose peer
// failed first still prints its own error before kolorun's grace period ends
// (kolorun SIGTERMs the other ranks as soon as one exits non-zero). check compares every record with cache_synthetic.h and prints
// "check ok N" or the first difference (exit 1).
#include <kolo/data/cache.h>
#include <kolo/kolo.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cache_synthetic.h"

namespace {

struct Args {
  std::string mode, path, transform = "synthetic/v1", expect_transform;
  std::uint64_t samples = 103, inputs = 7, kill_at = ~0ull, throw_at = ~0ull;
  int kill_rank = -1;
  std::size_t chunk = 4;
  bool variable = false, force = false, outlive_sigterm = false;
};

Args parse(int argc, char** argv) {
  if (argc < 3) throw std::runtime_error("usage: cache_rank_prog build|check PATH [options]");
  Args a;
  a.mode = argv[1];
  a.path = argv[2];
  for (int i = 3; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
      return argv[++i];
    };
    if (k == "--samples") a.samples = std::stoull(next());
    else if (k == "--transform") a.transform = next();
    else if (k == "--expect-transform") a.expect_transform = next();
    else if (k == "--inputs") a.inputs = std::stoull(next());
    else if (k == "--chunk") a.chunk = std::stoull(next());
    else if (k == "--kill-rank") a.kill_rank = std::stoi(next());
    else if (k == "--kill-at") a.kill_at = std::stoull(next());
    else if (k == "--throw-at") a.throw_at = std::stoull(next());
    else if (k == "--variable") a.variable = true;
    else if (k == "--force") a.force = true;
    else if (k == "--outlive-sigterm") a.outlive_sigterm = true;
    else throw std::runtime_error("unknown option " + k);
  }
  return a;
}

kolo::data::CacheSpec spec_of(const Args& a) {
  kolo::data::CacheSpec s;
  s.num_samples = a.samples;
  s.transform = a.transform;
  s.inputs = a.inputs;
  s.dtype = kolo::DType::F32;
  if (!a.variable) s.shape = {cache_test::kRows, cache_test::kCols};
  return s;
}

int build(const Args& a) {
  auto comm = kolo::init();
  const int rank = comm.rank();
  auto transform = [&](std::uint64_t i, kolo::data::Record& r) {
    if (rank == a.kill_rank && i == a.kill_at) {
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
    if (i == a.throw_at) throw std::runtime_error("synthetic failure at " + std::to_string(i));
    const auto v = cache_test::sample(i, a.transform, !a.variable);
    r.assign(v.data(), v.size());
    r.label = cache_test::label(i);
  };
  kolo::data::BuildOptions o;
  o.chunk = a.chunk;
  o.force = a.force;
  const auto res = kolo::data::build_cache(comm, a.path, spec_of(a), transform, o);
  if (rank == 0) std::printf(res.built ? "built: %s\n" : "reused%s\n", res.reason.c_str());
  return 0;
}

int check(const Args& a) {
  kolo::data::OpenOptions o;
  if (!a.expect_transform.empty()) o.transform = a.expect_transform;
  const auto cache = kolo::data::Cache::open(a.path, o);
  if (cache.size() != a.samples) {
    std::printf("check: %llu samples, expected %llu\n", static_cast<unsigned long long>(cache.size()),
                static_cast<unsigned long long>(a.samples));
    return 1;
  }
  for (std::uint64_t i = 0; i < cache.size(); ++i) {
    const auto v = cache_test::sample(i, a.transform, !a.variable);
    if (cache.bytes(i) != v.size() * sizeof(float) || std::memcmp(cache.data(i), v.data(), cache.bytes(i)) != 0 ||
        cache.label(i) != cache_test::label(i) || reinterpret_cast<std::uintptr_t>(cache.data(i)) % 64 != 0) {
      std::printf("check: sample %llu differs\n", static_cast<unsigned long long>(i));
      return 1;
    }
  }
  std::printf("check ok %llu stride %llu\n", static_cast<unsigned long long>(cache.size()),
              static_cast<unsigned long long>(cache.stride()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (a.outlive_sigterm) std::signal(SIGTERM, SIG_IGN);
    if (a.mode == "build") return build(a);
    if (a.mode == "check") return check(a);
    throw std::runtime_error("unknown mode " + a.mode);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "cache_rank_prog: %s\n", e.what());
    return 1;
  }
}
