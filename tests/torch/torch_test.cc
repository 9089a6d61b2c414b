// kolo_torch tests. The sampler is tested in process; everything else runs
// torch_rank_prog as real processes under kolorun and asserts on the files
// it writes, its output and its exit status. This file does not include
// LibTorch (compile time); torch_rank_prog's sources do.
#include <gtest/gtest.h>
#include <kolo/kolo.h>
#include <kolo/torch/sampler.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using kolo::torch::DistributedSampler;
using kolo::torch::SamplerOptions;

namespace {

// ---------------------------------------------------------------------------
// Sampler (in process: one DistributedSampler per simulated rank)

std::vector<std::vector<std::size_t>> shards(std::size_t n, int size, SamplerOptions o,
                                             std::uint64_t epoch) {
  std::vector<std::vector<std::size_t>> out;
  for (int r = 0; r < size; ++r) {
    DistributedSampler s(r, size, n, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

TEST(Sampler, PadGivesEqualCoveringShards) {
  for (std::size_t n : {1u, 7u, 100u, 103u}) {
    for (int size : {1, 2, 3, 4}) {
      auto sh = shards(n, size, {.shuffle = true, .seed = 9, .drop_last = false}, 0);
      const std::size_t len = (n + size - 1) / size;
      std::multiset<std::size_t> all;
      for (auto& s : sh) {
        EXPECT_EQ(s.size(), len) << "n=" << n << " size=" << size;
        all.insert(s.begin(), s.end());
      }
      for (std::size_t i = 0; i < n; ++i) EXPECT_GE(all.count(i), 1u) << "sample " << i << " not covered";
      // Only the padding repeats samples.
      std::set<std::size_t> distinct(all.begin(), all.end());
      EXPECT_EQ(distinct.size(), n);
      EXPECT_EQ(all.size(), len * size);
      if (n % size == 0) {
        EXPECT_EQ(all.size(), n) << "shards must be disjoint when nothing is padded";
      }
    }
  }
}

TEST(Sampler, DropLastGivesEqualDisjointShards) {
  for (std::size_t n : {7u, 100u, 103u}) {
    for (int size : {1, 2, 3, 4}) {
      auto sh = shards(n, size, {.shuffle = true, .seed = 9, .drop_last = true}, 2);
      std::set<std::size_t> all;
      for (auto& s : sh) {
        EXPECT_EQ(s.size(), n / size);
        for (auto i : s) EXPECT_TRUE(all.insert(i).second) << "index " << i << " on two ranks";
      }
      EXPECT_EQ(all.size(), n - n % size);
      for (auto i : all) EXPECT_LT(i, n);
    }
  }
}

TEST(Sampler, ReshuffledPerEpochAndDeterministic) {
  auto e0 = shards(1000, 2, {.shuffle = true, .seed = 1}, 0);
  auto e0b = shards(1000, 2, {.shuffle = true, .seed = 1}, 0);
  auto e1 = shards(1000, 2, {.shuffle = true, .seed = 1}, 1);
  auto s2 = shards(1000, 2, {.shuffle = true, .seed = 2}, 0);
  EXPECT_EQ(e0, e0b);  // same seed and epoch: the same order on every rank and run
  EXPECT_NE(e0[0], e1[0]);
  EXPECT_NE(e0[0], s2[0]);
  std::set<std::size_t> a(e0[0].begin(), e0[0].end()), b(e1[0].begin(), e1[0].end());
  EXPECT_NE(a, b) << "a new epoch must also move samples between ranks";
  // set_epoch on one sampler object reshuffles it.
  DistributedSampler s(0, 2, 1000, {.shuffle = true, .seed = 1});
  s.set_epoch(1);
  EXPECT_EQ(s.indices(), e1[0]);
}

TEST(Sampler, NoShuffleIsStrided) {
  // 10 samples on 3 ranks: padded to 12 with samples 0 and 1, as in PyTorch.
  DistributedSampler s(1, 3, 10, {.shuffle = false});
  EXPECT_EQ(s.indices(), (std::vector<std::size_t>{1, 4, 7, 0}));
  DistributedSampler t(2, 3, 10, {.shuffle = false});
  EXPECT_EQ(t.indices(), (std::vector<std::size_t>{2, 5, 8, 1}));
  DistributedSampler u(0, 3, 10, {.shuffle = false});
  EXPECT_EQ(u.indices(), (std::vector<std::size_t>{0, 3, 6, 9}));
  DistributedSampler d(2, 3, 10, {.shuffle = false, .drop_last = true});
  EXPECT_EQ(d.indices(), (std::vector<std::size_t>{2, 5, 8}));
}

TEST(Sampler, BatchesStateAndResume) {
  DistributedSampler s(1, 2, 21, {.shuffle = true, .seed = 4});
  s.set_epoch(3);
  std::vector<std::size_t> seen;
  auto b1 = s.next(4);
  ASSERT_TRUE(b1);
  EXPECT_EQ(b1->size(), 4u);
  seen.insert(seen.end(), b1->begin(), b1->end());
  const auto st = s.state();
  EXPECT_EQ(st.epoch, 3u);
  EXPECT_EQ(st.position, 4u);

  DistributedSampler r(1, 2, 21, {.shuffle = true, .seed = 4});
  r.set_state(st);
  r.set_epoch(3);  // right after set_state: keeps the position
  std::vector<std::size_t> rest_a, rest_b;
  while (auto b = s.next(4)) rest_a.insert(rest_a.end(), b->begin(), b->end());
  while (auto b = r.next(4)) rest_b.insert(rest_b.end(), b->begin(), b->end());
  EXPECT_EQ(rest_a, rest_b);
  EXPECT_EQ(rest_a.size() + 4, s.num_samples());
  EXPECT_FALSE(s.next(4));
  s.set_epoch(3);  // an ordinary set_epoch rewinds
  EXPECT_EQ(s.position(), 0u);
  EXPECT_THROW(r.set_state({3, 1000}), kolo::Error);
}

// Elastic: 3 ranks hand out `batches` batches each, then the survivors (2
// ranks) are dealt the rest of the epoch. Returns every index handed out.
std::multiset<std::size_t> reshard_3_to_2(std::size_t n, std::size_t batches, SamplerOptions o,
                                          std::uint64_t* consumed) {
  const std::size_t kBatch = 8;
  std::multiset<std::size_t> out;
  std::vector<DistributedSampler> three;
  for (int r = 0; r < 3; ++r) {
    three.emplace_back(r, 3, n, o);
    three.back().set_epoch(5);
  }
  for (std::size_t k = 0; k < batches; ++k)
    for (auto& s : three)
      if (auto b = s.next(kBatch)) out.insert(b->begin(), b->end());
  *consumed = three[0].consumed();
  for (auto& s : three) EXPECT_EQ(s.consumed(), *consumed);  // lockstep: every rank agrees
  // Ranks 0 and 2 survive and become 0 and 1.
  for (int old : {0, 2}) {
    DistributedSampler& s = three[static_cast<std::size_t>(old)];
    s.reshard(old == 0 ? 0 : 1, 2, 5, *consumed);
    s.set_epoch(5);  // right after reshard: keeps going in this epoch
    EXPECT_EQ(s.epoch(), 5u);
    while (auto b = s.next(kBatch)) out.insert(b->begin(), b->end());
  }
  return out;
}

TEST(Sampler, ReshardDealsTheRestOfTheEpochOnce) {
  // 103 samples: 3 ranks x 4 batches of 8 use 96; the 7 left go to 2 ranks,
  // one padded (a repeat, as a fresh epoch pads); drop_last drops it instead.
  std::uint64_t consumed = 0;
  auto pad = reshard_3_to_2(103, 4, {.shuffle = true, .seed = 3}, &consumed);
  EXPECT_EQ(consumed, 96u);
  EXPECT_EQ(pad.size(), 104u);
  EXPECT_EQ(std::set<std::size_t>(pad.begin(), pad.end()).size(), 103u);  // every sample, one twice
  auto drop = reshard_3_to_2(103, 4, {.shuffle = true, .seed = 3, .drop_last = true}, &consumed);
  EXPECT_EQ(consumed, 96u);
  EXPECT_EQ(drop.size(), 102u);
  EXPECT_EQ(std::set<std::size_t>(drop.begin(), drop.end()).size(), 102u);  // none twice, one dropped
  // 120 samples, 2 batches each (48 used): the 72 left split evenly — each sample exactly once.
  auto even = reshard_3_to_2(120, 2, {.shuffle = true, .seed = 3}, &consumed);
  EXPECT_EQ(consumed, 48u);
  std::multiset<std::size_t> all;
  for (std::size_t i = 0; i < 120; ++i) all.insert(i);
  EXPECT_EQ(even, all);

  // The survivors continue the same global order: what rank 0 gets after the
  // reshard are positions 48, 50, 52... of the epoch's order.
  const auto order = kolo::torch::shuffled_indices(120, 3, 5);
  DistributedSampler s(0, 2, 120, {.shuffle = true, .seed = 3});
  s.reshard(0, 2, 5, 48);  // the epoch comes with the commit
  EXPECT_EQ(s.num_samples(), 36u);
  EXPECT_EQ(s.indices()[0], order[48]);
  EXPECT_EQ(s.indices()[1], order[50]);
  // state() carries the start, so a checkpoint taken now resumes here.
  s.next(4);
  const auto st = s.state();
  EXPECT_EQ(st.start, 48u);
  EXPECT_EQ(s.consumed(), 56u);
  DistributedSampler r(0, 2, 120, {.shuffle = true, .seed = 3});
  r.set_state(st);
  EXPECT_EQ(r.indices(), s.indices());
  EXPECT_EQ(r.position(), 4u);
  // The end of the epoch: nothing left to deal; the next epoch is whole again.
  s.reshard(1, 2, 5, 120);
  EXPECT_FALSE(s.next(4));
  s.set_epoch(6);
  EXPECT_EQ(s.num_samples(), 60u);
  EXPECT_THROW(s.reshard(0, 2, 6, 121), kolo::Error);
  EXPECT_THROW(s.reshard(2, 2, 6, 0), kolo::Error);
}

// ---------------------------------------------------------------------------
// Multi-process helpers

struct Result {
  int rc = -1;
  std::string out;
};

// Runs a shell command, output and errors together.
Result sh(const std::string& cmd) {
  Result r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int st = pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// Short collective timeouts so that a broken test fails instead of hanging.
const char* kEnv = "KOLO_TIMEOUT_MS=60000 ";

Result ranks(int n, const std::string& args) {
  return sh(std::string(kEnv) + KOLORUN + " -np " + std::to_string(n) + " --timeout 240 " + RANK_PROG +
            " " + args);
}
Result single(const std::string& args) { return sh(std::string(kEnv) + RANK_PROG + " " + args); }

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kolo_torch_test.XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& f) const { return path_ + "/" + f; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

using Params = std::map<std::string, std::vector<double>>;

Params read_params(const std::string& path) {
  Params p;
  std::ifstream in(path);
  std::string name;
  std::size_t n;
  while (in >> name >> n) {
    auto& v = p[name];
    v.resize(n);
    for (auto& x : v) in >> x;
  }
  return p;
}

// Per tensor: max|a-b| <= tol * max|b|.
void expect_close(const Params& got, const Params& want, double tol, const std::string& what) {
  ASSERT_FALSE(want.empty()) << what << ": no baseline parameters";
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": missing " << name;
    const auto& g = it->second;
    ASSERT_EQ(g.size(), w.size()) << what << ": " << name;
    double maxdiff = 0, scale = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      maxdiff = std::max(maxdiff, std::abs(g[i] - w[i]));
      scale = std::max(scale, std::abs(w[i]));
    }
    EXPECT_LE(maxdiff, tol * scale) << what << ": " << name << " differs by " << maxdiff
                                    << " (relative " << maxdiff / scale << ", tolerance " << tol << ")";
  }
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ---------------------------------------------------------------------------
// N ranks with per-rank batch b == 1 rank with batch N·b, same samples.

constexpr int kSteps = 8;
constexpr int kBatch = 8;

struct Variant {
  const char* name;
  const char* args;
  double tol;  // relative, per tensor
};

// f32 runs differ from the baseline only by summation order: tolerance 1e-5
// (measured ~2e-7). The 16-bit wire formats round every gradient to 8 (bf16)
// or 11 (fp16) significant bits before the sum: tolerances 1e-2 and 2e-3
// after 8 momentum steps (measured ~2.5e-3 and ~2e-4).
const Variant kVariants[] = {
    {"small_buckets", "--small-buckets", 1e-5},
    {"default_buckets", "", 1e-5},
    {"accumulate2", "--accumulate 2 --small-buckets", 1e-5},
    {"no_overlap", "--no-overlap --small-buckets", 1e-5},
    {"overlap_always", "--overlap-always --small-buckets", 1e-5},
    {"overlap_chosen", "--overlap-trials 1 --small-buckets", 1e-5},  // chosen after step 4 of 8
    {"noncontig", "--noncontig --copy-grads --zero-memset --small-buckets", 1e-5},
    {"zero_memset", "--zero-memset --small-buckets", 1e-5},
    {"synchronize", "--synchronize --small-buckets", 1e-5},
    {"copy_grads", "--copy-grads", 1e-5},
    {"grads_to_none", "--grads-to-none --small-buckets", 1e-5},
    {"predivide", "--predivide 2", 1e-5},
    {"sum", "--sum", 1e-5},
    {"bf16", "--compression bf16 --small-buckets", 1e-2},
    {"fp16", "--compression fp16", 2e-3},
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name << " (" << v.args << ")"; }

class Equivalence : public ::testing::TestWithParam<std::tuple<int, Variant>> {
 protected:
  static const Params& baseline(int n) {
    static std::map<int, Params> cache;
    static TempDir dir;
    auto it = cache.find(n);
    if (it != cache.end()) return it->second;
    const std::string out = dir / ("baseline" + std::to_string(n) + ".txt");
    auto r = single("equiv --steps " + std::to_string(kSteps) + " --batch " +
                    std::to_string(n * kBatch) + " --out " + out);
    EXPECT_EQ(r.rc, 0) << r.out;
    return cache[n] = read_params(out);
  }
};

TEST_P(Equivalence, MatchesOneRankWithNTimesTheBatch) {
  const auto [n, v] = GetParam();
  TempDir dir;
  const std::string out = dir / "params.txt";
  auto r = ranks(n, "equiv --steps " + std::to_string(kSteps) + " --batch " + std::to_string(kBatch) +
                        " --out " + out + " " + v.args);
  ASSERT_EQ(r.rc, 0) << r.out;  // includes: identical on all ranks after broadcast and every step
  expect_close(read_params(out), baseline(n), v.tol, v.name);
}

std::string variant_name(const ::testing::TestParamInfo<std::tuple<int, Variant>>& info) {
  return std::string(std::get<1>(info.param).name) + "_" + std::to_string(std::get<0>(info.param)) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(Torch, Equivalence,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::ValuesIn(kVariants)), variant_name);

// The same on CUDA tensors against the CPU baseline, only where
// KOLO_TEST_DEVICE=cuda (tests/gpu/run-on-device.sh runs them on the GPU
// machine; elsewhere, CI included, there are none, so none is counted as
// passed). Tolerance 1e-4: CUDA's kernels round otherwise than the CPU's
// (TF32 is off); a gradient taken before the side stream's backward, or
// handed back before kolo's result, is off by far more.
std::vector<Variant> cuda_variants() {
  const char* device = std::getenv("KOLO_TEST_DEVICE");
  if (device == nullptr || std::string(device) != "cuda") return {};
  return {
      {"cuda", "--device cuda --small-buckets", 1e-4},
      {"cuda_side_stream", "--device cuda --side-stream --small-buckets", 1e-4},
      {"cuda_side_stream_copies", "--device cuda --side-stream --noncontig --copy-grads --zero-memset", 1e-4},
      {"cuda_side_stream_fp16", "--device cuda --side-stream --compression fp16", 2e-3},
  };
}
INSTANTIATE_TEST_SUITE_P(TorchCuda, Equivalence,
                         ::testing::Combine(::testing::Values(2), ::testing::ValuesIn(cuda_variants())), variant_name);

// Overlap::Auto: 2 warm-up steps overlapped, then 2 trial steps per mode
// alternating, then every rank keeps the same mode (which one depends on this
// machine's timings; the results are the same either way, see Equivalence).
TEST(Overlap, AutoTriesBothModesThenEveryRankKeepsOne) {
  auto r = ranks(3, "equiv --steps 9 --overlap-trials 2 --print-overlap");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::smatch m;
  std::string chosen;
  for (int rank = 0; rank < 3; ++rank) {
    const std::regex line("rank " + std::to_string(rank) + ": overlap \\+\\+\\+-\\+-([+-])\\1\\1, chosen");
    ASSERT_TRUE(std::regex_search(r.out, m, line)) << r.out;
    if (rank == 0) chosen = m[1];
    EXPECT_EQ(m[1], chosen) << "rank " << rank << " kept another mode than rank 0:\n" << r.out;
  }
  // One rank communicates nothing: no trial.
  auto one = single("equiv --steps 4 --overlap-trials 1 --print-overlap");
  ASSERT_EQ(one.rc, 0) << one.out;
  EXPECT_NE(one.out.find("rank 0: overlap ++++, chosen"), std::string::npos) << one.out;
  auto bad = ranks(2, "equiv --steps 1 --overlap-trials 0");
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.out.find("DistributedOptimizer: overlap_trial_steps must be >= 1, not 0"), std::string::npos)
      << bad.out;
}

// ---------------------------------------------------------------------------
// Checkpoints

// Three 2-rank runs of mode "resume" with `common` arguments: uninterrupted
// (dir/full.txt); stopped right after a checkpoint at step `at`; resumed
// from it (dir/resumed.txt).
void run_resumed(const TempDir& dir, const std::string& common, int at) {
  auto full = ranks(2, "resume" + common + " --out " + (dir / "full.txt"));
  ASSERT_EQ(full.rc, 0) << full.out;
  const std::string stop = std::to_string(at);
  auto first = ranks(2, "resume" + common + " --ckpt-at " + stop + " --stop-at " + stop + " --ckpt " +
                            (dir / "c.ckpt") + " --out " + (dir / "unused.txt"));
  ASSERT_EQ(first.rc, 0) << first.out;
  auto second = ranks(2, "resume" + common + " --resume-from " + (dir / "c.ckpt") + " --out " +
                             (dir / "resumed.txt"));
  ASSERT_EQ(second.rc, 0) << second.out;
}

TEST(Checkpoint, ResumeContinuesBitIdentically) {
  TempDir dir;
  // Stop right after the checkpoint at step 17 (mid-epoch: 200 samples, 2×8 per step).
  ASSERT_NO_FATAL_FAILURE(run_resumed(dir, " --steps 40 --batch 8 --small-buckets", 17));
  const std::string a = slurp(dir / "full.txt"), b = slurp(dir / "resumed.txt");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the resumed run's parameters differ from the uninterrupted run's";
}

TEST(Checkpoint, WriteKilledMidwayLeavesPreviousLoadable) {
  TempDir dir;
  const std::string ckpt = dir / "m.ckpt";
  auto r = single("ckpt_kill --ckpt " + ckpt);
  EXPECT_NE(r.out.find("v1 saved"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("v2 saved"), std::string::npos) << r.out;
  EXPECT_EQ(r.rc, 128 + SIGXFSZ) << "the second save should have been killed by SIGXFSZ\n" << r.out;
  // The half-written temporary is there; the checkpoint is still v1.
  bool partial = false;
  for (const auto& e : fs::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind("m.ckpt.tmp.", 0) == 0) partial = true;
  EXPECT_TRUE(partial) << "no partial temporary file: the write was not interrupted midway";
  auto load = ranks(2, "ckpt_load --ckpt " + ckpt);
  ASSERT_EQ(load.rc, 0) << load.out;
  EXPECT_NE(load.out.find("rank 0 loaded epoch 1 step 10 w[0]=1 w[last]=1"), std::string::npos) << load.out;
  EXPECT_NE(load.out.find("rank 1 loaded epoch 1 step 10 w[0]=1 w[last]=1"), std::string::npos) << load.out;
}

class BadCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = single("ckpt_save --ckpt " + good_);
    ASSERT_EQ(r.rc, 0) << r.out;
    bytes_ = slurp(good_);
    ASSERT_GT(bytes_.size(), 1000u);
  }
  void write(const std::string& content) {
    std::ofstream(bad_, std::ios::binary) << content;
  }
  void expect_error(const std::string& text) {
    const std::string before = slurp(bad_);
    auto r = ranks(2, "ckpt_load --ckpt " + bad_);
    EXPECT_NE(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("kolo rank 0: " + text), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("loaded epoch"), std::string::npos) << r.out;
    EXPECT_EQ(slurp(bad_), before) << "loading must not touch the file";
  }
  TempDir dir_;
  std::string good_ = dir_ / "good.ckpt", bad_ = dir_ / "bad.ckpt";
  std::string bytes_;
};

TEST_F(BadCheckpoint, Truncated) {
  write(bytes_.substr(0, bytes_.size() / 2));
  expect_error("checkpoint '" + bad_ + "' is truncated: the header promises");
  write(bytes_.substr(0, 20));
  expect_error("checkpoint '" + bad_ + "' is truncated: 20 bytes, shorter than its 32-byte header");
}

TEST_F(BadCheckpoint, Foreign) {
  write("this is a text file, not a checkpoint\n");
  expect_error("'" + bad_ + "' is not a kolo checkpoint");
  write("");
  expect_error("'" + bad_ + "' is not a kolo checkpoint");
}

TEST_F(BadCheckpoint, Corrupt) {
  std::string b = bytes_;
  b[b.size() / 2] ^= 0x55;
  write(b);
  expect_error("checkpoint '" + bad_ + "' is corrupt: CRC-32 mismatch");
}

TEST_F(BadCheckpoint, Missing) {
  auto r = ranks(2, "ckpt_load --ckpt " + (dir_ / "nope.ckpt"));
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("cannot open checkpoint '" + (dir_ / "nope.ckpt") + "'"), std::string::npos) << r.out;
}

// ---------------------------------------------------------------------------
// Errors that must say what is wrong

TEST(Errors, UnusedParameter) {
  auto r = ranks(2, "unused");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("kolo rank 1: parameters 'fc2.weight', 'fc2.bias' received no gradient in "
                       "this step; pass find_unused_parameters=true if that is intended"),
            std::string::npos)
      << r.out;
}

TEST(Errors, UnusedParameterAllowedWithFindUnused) {
  auto r = ranks(2, "unused --find-unused --small-buckets");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("rank 1: unused-parameter steps done"), std::string::npos) << r.out;
  auto all = ranks(2, "unused --find-unused --all");
  EXPECT_EQ(all.rc, 0) << all.out;
}

TEST(Errors, SparseGradient) {
  auto r = ranks(2, "sparse");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("parameter 'emb.weight' received a sparse gradient; DistributedOptimizer "
                       "reduces dense gradients only"),
            std::string::npos)
      << r.out;
}

TEST(Errors, NonCpuParameter) {
  auto r = ranks(2, "device");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("parameter 'w' is on meta, but kolo communicates CPU and CUDA tensors only"),
            std::string::npos)
      << r.out;
}

TEST(Errors, ShapeMismatchAtBroadcast) {
  auto r = ranks(2, "mismatch");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("broadcast_parameters: the models differ between ranks (compared with root rank 0)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("rank 1: parameter fc1.weight is [12, 144] Float, on rank 0 it is [16, 144] Float"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("rank 1: parameter fc2.weight is [5, 12] Float, on rank 0 it is [5, 16] Float"),
            std::string::npos)
      << r.out;
}

// ---------------------------------------------------------------------------
// The other collectives

TEST(LinearScalingWarmup, RampsEachParamGroupToScaleTimesItsBase) {
  auto r = single("lr");
  EXPECT_EQ(r.rc, 0) << r.out;
}

TEST(Collectives, BroadcastOptimizerState) {
  auto r = ranks(2, "optstate");
  EXPECT_EQ(r.rc, 0) << r.out;
}

TEST(Collectives, TensorBroadcastAllreduce) {
  auto r = ranks(3, "tensors");
  EXPECT_EQ(r.rc, 0) << r.out;
}

TEST(Errors, BadTensorsRefusedOnEveryRank) {
  auto r = ranks(2, "bad_tensors");
  ASSERT_EQ(r.rc, 0) << r.out;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string k = "kolo rank " + std::to_string(rank) + ": ";
    for (const std::string& line : {
             "non-contiguous allreduce: " + k + "allreduce: the tensor is not contiguous (sizes [4, 3], "
                 "strides [1, 4]); kolo works in place in the tensor's memory: pass a contiguous tensor",
             "non-contiguous broadcast: " + k + "broadcast: the tensor is not contiguous (sizes [4, 3], strides [1, 4])",
             "sparse allreduce: " + k + "the tensor is sparse; kolo communicates dense tensors only",
             "sparse broadcast: " + k + "the tensor is sparse; kolo communicates dense tensors only",
             "meta allreduce: " + k + "the tensor is on meta, but kolo communicates CPU and CUDA tensors only",
             "bool allreduce: " + k + "allreduce: op sum is not defined for Bool",
             "complex broadcast: " + k + "the tensor has dtype ComplexFloat, which kolo does not communicate",
             "rank " + std::to_string(rank) + ": bad tensors refused"})
      EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  }
}

TEST(Collectives, TorchDataLoaderWithSampler) {
  auto r = ranks(2, "loader");
  EXPECT_EQ(r.rc, 0) << r.out;
}

// ---------------------------------------------------------------------------
// GradScaler

// The scale sequence the options imply (growth ×2 after `interval` good
// steps, ×0.5 and a reset on an overflow), computed here independently.
std::vector<std::string> expected_scaler_log(int rank, int steps, double scale, int interval, int overflow) {
  std::vector<std::string> lines;
  int good = 0;
  for (int s = 0; s < steps; ++s) {
    const bool skip = s == overflow;
    if (skip) {
      scale *= 0.5;
      good = 0;
    } else if (++good == interval) {
      scale *= 2;
      good = 0;
    }
    std::ostringstream line;
    line << "rank " << rank << " step " << s << (skip ? " skipped" : " stepped") << " scale " << scale;
    lines.push_back(line.str());
  }
  return lines;
}

void expect_scaler_log(const Result& r, int nranks, int steps, int overflow) {
  for (int rank = 0; rank < nranks; ++rank)
    for (const auto& line : expected_scaler_log(rank, steps, 1024, 3, overflow))
      EXPECT_NE(r.out.find(line + "\n"), std::string::npos) << line << "\n" << r.out;
}

// An inf in one averaged gradient on rank 1 only (after synchronize()): only
// GradScaler's collective can tell rank 0, which must skip the same step.
TEST(GradScaler, OverflowOnOneRankSkipsTheStepOnEveryRank) {
  for (int n : {2, 3}) {
    auto r = ranks(n, "scaler --steps 8 --overflow-step 4 --overflow-rank 1 --inject grad");
    ASSERT_EQ(r.rc, 0) << r.out;  // includes: identical parameters, skipped steps change nothing
    expect_scaler_log(r, n, 8, 4);
  }
}

TEST(GradScaler, InfInOneRanksLoss) {
  auto r = ranks(2, "scaler --steps 6 --overflow-step 1 --overflow-rank 0 --inject loss --small-buckets");
  ASSERT_EQ(r.rc, 0) << r.out;
  expect_scaler_log(r, 2, 6, 1);
}

TEST(GradScaler, GrowsAfterTheInterval) {
  auto r = ranks(2, "scaler --steps 7");
  ASSERT_EQ(r.rc, 0) << r.out;
  expect_scaler_log(r, 2, 7, -1);  // 1024 → 2048 after step 2 → 4096 after step 5
  EXPECT_NE(r.out.find("rank 1 step 6 stepped scale 4096\n"), std::string::npos) << r.out;
}

// Scaled losses (powers of two) unscaled before clipping give exactly the
// 1-rank run's clipped training.
TEST(GradScaler, UnscalesBeforeClipping) {
  TempDir dir;
  const std::string args = "equiv --steps 8 --clip 0.1 --out ";
  auto base = single(args + (dir / "base.txt") + " --batch 16");
  ASSERT_EQ(base.rc, 0) << base.out;
  auto r = ranks(2, args + (dir / "scaled.txt") + " --batch 8 --scaler --small-buckets");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("rank 0: clipped 8 of 8 steps"), std::string::npos) << "clipping must be active\n" << r.out;
  EXPECT_NE(r.out.find("rank 1: final scale 4096"), std::string::npos) << r.out;
  expect_close(read_params(dir / "scaled.txt"), read_params(dir / "base.txt"), 1e-5, "scaler+clip");
}

TEST(GradScaler, ResumeRestoresTheScale) {
  TempDir dir;
  // Overflow at step 9, checkpoint at 13: scale and growth tracker are then
  // neither their initial values nor at an interval boundary.
  ASSERT_NO_FATAL_FAILURE(run_resumed(dir, " --steps 24 --batch 8 --scaler --overflow-at 9", 13));
  const auto a = read_params(dir / "full.txt");
  // The scale the options imply, by the driver's own arithmetic.
  double scale = 1024;
  int good = 0;
  for (int s = 0; s < 24; ++s) {
    if (s == 9) {
      scale *= 0.5;
      good = 0;
    } else if (++good == 3) {
      scale *= 2;
      good = 0;
    }
  }
  ASSERT_EQ(a.count("scaler.scale"), 1u);
  EXPECT_EQ(a.at("scaler.scale")[0], scale);
  EXPECT_EQ(a.at("scaler.growth_tracker")[0], good);
  EXPECT_TRUE(slurp(dir / "full.txt") == slurp(dir / "resumed.txt"))
      << "the resumed run's parameters or scale differ from the uninterrupted run's";
}

// ---------------------------------------------------------------------------
// SyncBatchNorm and broadcast_buffers

struct BnCase {
  int ranks;
  const char* rows;
  int dim;  // 2: BatchNorm2d [N,C,H,W]; 1: BatchNorm1d [N,C]; 3: BatchNorm1d [N,C,L]
  const char* extra = "";
};

void PrintTo(const BnCase& c, std::ostream* os) {
  *os << c.ranks << " ranks, rows " << c.rows << ", dim " << c.dim << " " << c.extra;
}

class SyncBN : public ::testing::TestWithParam<BnCase> {};

TEST_P(SyncBN, EqualsBatchNormOverTheGlobalBatch) {
  const auto c = GetParam();
  auto r = ranks(c.ranks, std::string("syncbn --rows ") + c.rows + " --dim " + std::to_string(c.dim) + " " +
                            c.extra);
  ASSERT_EQ(r.rc, 0) << r.out;
  for (int rank = 0; rank < c.ranks; ++rank) {
    const std::string k = std::to_string(rank);
    EXPECT_NE(r.out.find("rank " + k + ": SyncBatchNorm matches BatchNorm"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("kolo rank " + k + ": SyncBatchNorm(3): expected an input [N, 3, ...] of 2 to 5 "
                         "dimensions, got [4, 5] Float"),
              std::string::npos)
        << r.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Torch, SyncBN,
                         ::testing::Values(BnCase{2, "4,4", 2}, BnCase{2, "6,2", 2}, BnCase{3, "5,1,3", 2},
                                           BnCase{3, "4,0,7", 2}, BnCase{2, "7,3", 1},
                                           BnCase{3, "2,5,4", 3}, BnCase{2, "5,3", 2, "--bf16"}),
                         [](const auto& info) {
                           std::string rows = info.param.rows;
                           std::replace(rows.begin(), rows.end(), ',', '_');
                           return std::to_string(info.param.ranks) + "ranks_rows" + rows + "_dim" +
                                  std::to_string(info.param.dim) + (*info.param.extra ? "_bf16" : "");
                         });

TEST(BroadcastBuffers, EveryRankHoldsRankZerosRunningStats) {
  auto on = ranks(2, "bufbcast");
  ASSERT_EQ(on.rc, 0) << on.out;
  EXPECT_NE(on.out.find("rank 1: buffers equal rank 0's"), std::string::npos) << on.out;
  // Without the option the ranks' statistics drift apart (what the option is for).
  auto off = ranks(2, "bufbcast --off");
  ASSERT_EQ(off.rc, 0) << off.out;
  EXPECT_NE(off.out.find("rank 1: buffers differ between ranks"), std::string::npos) << off.out;
}

// ---------------------------------------------------------------------------
// Join (uneven inputs)

struct JoinCase {
  const char* batches;
  const char* extra;
  const char* ref_extra = "";  // for join_ref
};

void PrintTo(const JoinCase& c, std::ostream* os) { *os << "batches " << c.batches << " " << c.extra; }

// The scale after the Join tests' overflow: 1024, ×2 per 3 good steps, ×0.5 on the overflow.
TEST(JoinScaler, ShadowStepsKeepTheScaleInStep) {
  auto r = ranks(2, "join --batches 3,6 --scaler --overflow-step 4 --overflow-rank 1");
  ASSERT_EQ(r.rc, 0) << r.out;
  // Steps 0-2 good (→2048), 3 good, 4 skipped (→1024), 5 good.
  EXPECT_NE(r.out.find("rank 0: final scale 1024\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1: final scale 1024\n"), std::string::npos) << r.out;
}

class JoinTest : public ::testing::TestWithParam<JoinCase> {};

TEST_P(JoinTest, EndsIdenticalAndEqualToTheReference) {
  const auto c = GetParam();
  const int n = static_cast<int>(std::count(c.batches, c.batches + std::strlen(c.batches), ',')) + 1;
  TempDir dir;
  auto ref = single(std::string("join_ref --batches ") + c.batches + " --out " + (dir / "ref.txt") + " " +
                    c.ref_extra);
  ASSERT_EQ(ref.rc, 0) << ref.out;
  auto r = ranks(n, std::string("join --batches ") + c.batches + " --out " + (dir / "join.txt") + " " + c.extra);
  ASSERT_EQ(r.rc, 0) << r.out;  // includes: identical parameters on all ranks, counts of shadowed steps
  expect_close(read_params(dir / "join.txt"), read_params(dir / "ref.txt"), 1e-5, c.batches);
}

INSTANTIATE_TEST_SUITE_P(Torch, JoinTest,
                         ::testing::Values(JoinCase{"3,6", ""}, JoinCase{"6,3", "--small-buckets"},
                                           JoinCase{"4,0,2", "--small-buckets"},
                                           JoinCase{"3,6", "--no-overlap --copy-grads"},
                                           // Step 4: rank 0 shadows while rank 1 overflows.
                                           JoinCase{"3,6", "--scaler --overflow-step 4 --overflow-rank 1",
                                                    "--skip-step 4"},
                                           JoinCase{"5,2,3", "--scaler --overflow-step 1 --overflow-rank 2",
                                                    "--skip-step 1"}),
                         [](const auto& info) {
                           std::string b = info.param.batches;
                           std::replace(b.begin(), b.end(), ',', '_');
                           return "batches" + b + "_" + std::to_string(info.index);
                         });

}  // namespace
