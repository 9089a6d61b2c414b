// kolo::data cache tests: real processes under kolorun build caches of the
// synthetic data set (cache_synthetic.h) with cache_rank_prog; the tests
// assert on the files (bytes, inode, what is left in the directory), the
// output and the exit status. cache_read_prog reads a cache through the
// LibTorch dataset. This file includes neither LibTorch nor kolo::data.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../launcher/launcher_test_util.h"  // kolotest: kolorun as a real process

namespace fs = std::filesystem;

namespace {

struct Result {
  int rc = -1;
  std::string out;  // stdout and stderr
};

Result run(std::vector<std::string> args, int np) {
  // Short collective deadlines so that a broken build fails instead of hanging.
  ::setenv("KOLO_TIMEOUT_MS", "60000", 1);
  args.insert(args.begin(), {"-np", std::to_string(np), "--timeout", "120"});
  const auto o = kolotest::run_kolorun(args, 300);
  return {o.code, o.out + o.err};
}

// n ranks of cache_rank_prog; one for `check`, which does not call kolo::init().
Result ranks(int n, const std::string& mode, const std::string& path, const std::string& args) {
  std::vector<std::string> v{CACHE_PROG, mode, path};
  std::istringstream words(args);
  for (std::string w; words >> w;) v.push_back(w);
  return run(v, n);
}

std::string bytes_of(const std::string& path) { return kolotest::read_file(path); }

ino_t inode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

class Cache : public ::testing::Test {
 protected:
  // Names in the directory other than the cache itself.
  std::vector<std::string> leftovers() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(dir_))
      if (e.path().string() != path_) out.push_back(e.path().filename().string());
    return out;
  }
  void build_ok(int n, const std::string& args, const std::string& expect) {
    auto r = ranks(n, "build", path_, args);
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << "expected '" << expect << "' in:\n" << r.out;
  }
  Result check(const std::string& args) { return ranks(1, "check", path_, args); }
  kolotest::TempDir tmp_;  // removed with everything in it, whatever happens
  std::string dir_ = tmp_.path, path_ = tmp_.file("train.kcache");
};

TEST_F(Cache, ByteIdenticalWhateverTheNumberOfRanks) {
  for (const char* kind : {"", "--variable"}) {
    const std::string args = std::string("--samples 103 --chunk 4 ") + kind;
    build_ok(1, args, "built: no cache yet");
    const std::string one = bytes_of(path_);
    auto c = check(std::string("--samples 103 ") + kind);
    ASSERT_EQ(c.rc, 0) << c.out;
    build_ok(3, args + " --force", "built: forced");
    EXPECT_TRUE(bytes_of(path_) == one) << "1-rank and 3-rank caches differ (" << kind << ")";
    build_ok(2, args + " --chunk 64 --force", "built: forced");  // one round, the last block short
    EXPECT_TRUE(bytes_of(path_) == one) << "2-rank cache with chunk 64 differs (" << kind << ")";
    EXPECT_TRUE(leftovers().empty());
    fs::remove(path_);
  }
}

TEST_F(Cache, ReusedWhenFreshRebuiltWhenStale) {
  build_ok(2, "--samples 50", "built: no cache yet");
  const ino_t first = inode_of(path_);
  const std::string bytes = bytes_of(path_);
  // Same spec: reused, the file untouched (same inode, same bytes).
  build_ok(3, "--samples 50", "reused");
  EXPECT_EQ(inode_of(path_), first);
  EXPECT_TRUE(bytes_of(path_) == bytes);
  // Another transform version: rebuilt, and the reader sees the new samples.
  build_ok(2, "--samples 50 --transform synthetic/v2", "built: stale: transform 'synthetic/v1' != 'synthetic/v2'");
  EXPECT_NE(inode_of(path_), first);
  auto c = check("--samples 50 --transform synthetic/v2");
  EXPECT_EQ(c.rc, 0) << c.out;
  // Other inputs, other sample counts: rebuilt too.
  build_ok(2, "--samples 50 --transform synthetic/v2 --inputs 8",
           "built: stale: inputs fingerprint 0000000000000007 != 0000000000000008");
  build_ok(2, "--samples 51 --transform synthetic/v2 --inputs 8", "built: stale: 50 samples != 51");
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(Cache, OpenRefusesStaleWithTheFileName) {
  build_ok(1, "--samples 20", "built");
  auto r = check("--samples 20 --expect-transform synthetic/v9");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("cache '" + path_ + "' is stale: transform 'synthetic/v1' != 'synthetic/v9'"),
            std::string::npos)
      << r.out;
}

TEST_F(Cache, TruncatedIsAnErrorOnOpenAndRebuiltByBuild) {
  build_ok(2, "--samples 40", "built");
  const auto size = fs::file_size(path_);
  fs::resize_file(path_, size - 100);
  auto r = check("--samples 40");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("cache '" + path_ + "' is truncated: the header says " + std::to_string(size) +
                       " bytes, the file has " + std::to_string(size - 100)),
            std::string::npos)
      << r.out;
  fs::resize_file(path_, 1000);  // not even a whole header
  r = check("--samples 40");
  EXPECT_NE(r.out.find("is truncated: 1000 bytes, shorter than the 4096-byte header"), std::string::npos) << r.out;
  build_ok(2, "--samples 40", "built: truncated: 1000 bytes");
  EXPECT_EQ(check("--samples 40").rc, 0);
}

TEST_F(Cache, CorruptIsAnErrorOnOpenAndRebuiltByBuild) {
  build_ok(1, "--samples 40", "built");
  const std::string good = bytes_of(path_);
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    f.put(static_cast<char>(good[5000] ^ 0x10));  // one bit of a record
  }
  auto r = check("--samples 40");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("cache '" + path_ + "' is corrupt: the CRC-32 of its records and index does not match"),
            std::string::npos)
      << r.out;
  build_ok(3, "--samples 40", "built: corrupt: the CRC-32");
  EXPECT_TRUE(bytes_of(path_) == good);
}

TEST_F(Cache, ForeignFileIsRefusedAndKept) {
  { std::ofstream(path_) << "my precious notes, not a cache\n"; }
  // Rank 1 must outlive kolorun's SIGTERM (sent when rank 0 exits first) to
  // be seen saying why it stopped too.
  auto r = ranks(2, "build", path_, "--samples 10 --outlive-sigterm");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("kolo rank 0: '" + path_ + "' exists and is not a kolo cache"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kolo rank 1: build_cache: rank 0 refused"), std::string::npos) << r.out;
  EXPECT_TRUE(bytes_of(path_) == "my precious notes, not a cache\n");
  r = check("--samples 10");
  EXPECT_NE(r.out.find("cache '" + path_ + "' is not a kolo cache"), std::string::npos) << r.out;
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(Cache, RankKilledWhileBuildingLeavesNoCache) {
  // A non-zero rank dies mid-build: no cache, nothing else in the directory.
  auto r = ranks(3, "build", path_, "--samples 200 --kill-rank 1 --kill-at 100");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_FALSE(fs::exists(path_)) << r.out;
  EXPECT_TRUE(leftovers().empty()) << leftovers().front();
  // Rank 0 (the writer) is SIGKILLed mid-build over an older cache: the
  // older cache is intact and still readable, and no temporary file remains.
  build_ok(2, "--samples 200", "built");
  const std::string old = bytes_of(path_);
  // (3 ranks, chunk 4: rank 0 transforms samples 144..147 of the round at 144)
  r = ranks(3, "build", path_, "--samples 200 --transform synthetic/v2 --kill-rank 0 --kill-at 145");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_TRUE(bytes_of(path_) == old);
  EXPECT_TRUE(leftovers().empty()) << leftovers().front();
  EXPECT_EQ(check("--samples 200").rc, 0);
}

TEST_F(Cache, TransformErrorStopsEveryRank) {
  auto r = ranks(3, "build", path_, "--samples 60 --throw-at 45");  // chunk 4: rank 2's block
  EXPECT_NE(r.rc, 0) << r.out;
  // Whichever rank kolorun reports first, the error names rank 2 and its text.
  EXPECT_NE(r.out.find("build of the cache '" + path_ +
                       "' failed on rank 2: the transform failed on sample 45: synthetic failure at 45"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(path_));
  EXPECT_TRUE(leftovers().empty());
}

TEST_F(Cache, TorchDatasetReadsTheTransformedSamples) {
  build_ok(3, "--samples 77 --transform synthetic/v3", "built");
  const std::string before = bytes_of(path_);
  auto r = run({READ_PROG, path_, "77", "synthetic/v3"}, 1);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("dataset ok 77"), std::string::npos) << r.out;
  EXPECT_TRUE(bytes_of(path_) == before) << "writing into a tensor view changed the file";
  fs::remove(path_);
  build_ok(2, "--samples 30 --variable", "built");
  r = run({READ_PROG, path_, "30", "synthetic/v1", "--variable"}, 1);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("its records differ in length"), std::string::npos) << r.out;
}

}  // namespace

// The main job's preprocessing program: its augmentation is seeded per
// sample, so 1 and 2 ranks write the same bytes; a second run reuses the file.
TEST(Preprocess, FashionMnistCacheIsTheSameOnOneAndTwoRanks) {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(data + "/train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST at " << data;
  kolotest::TempDir tmp;
  const std::string one = tmp.file("np1.kcache"), two = tmp.file("np2.kcache");
  auto r = run({PREPROCESS_PROG, "--limit", "300", "--chunk", "16", "--out", one}, 1);
  ASSERT_EQ(r.rc, 0) << r.out;
  r = run({PREPROCESS_PROG, "--limit", "300", "--chunk", "16", "--out", two}, 2);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("300 samples"), std::string::npos) << r.out;
  EXPECT_TRUE(bytes_of(one) == bytes_of(two)) << "the 1-rank and 2-rank caches differ";
  EXPECT_EQ(fs::file_size(one), 4096u + 300u * 28 * 28 * 4 + 300u * 24);
  const ino_t ino = inode_of(two);
  r = run({PREPROCESS_PROG, "--limit", "300", "--chunk", "16", "--out", two}, 2);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("reusing the cache"), std::string::npos) << r.out;
  EXPECT_EQ(inode_of(two), ino);
  // Another augmentation parameter: another input fingerprint, rebuilt.
  r = run({PREPROCESS_PROG, "--limit", "300", "--chunk", "16", "--alpha", "2", "--out", two}, 2);
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("building (stale: inputs fingerprint"), std::string::npos) << r.out;
  EXPECT_FALSE(bytes_of(one) == bytes_of(two));
}

// The main job trains on exactly the cached samples: a cache of the plain
// images (--augment none applies the trainer's own normalisation, in the same
// f32 operations) gives bit-identical parameters to training from the IDX
// files; an augmented cache gives different ones.
TEST(Preprocess, MainJobTrainsOnTheCachedSamples) {
  const std::string data = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(data + "/train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST at " << data;
  ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  kolotest::TempDir tmp;
  auto r = run({PREPROCESS_PROG, "--augment", "none", "--limit", "512", "--out", tmp.file("plain.kcache")}, 2);
  ASSERT_EQ(r.rc, 0) << r.out;
  r = run({PREPROCESS_PROG, "--limit", "512", "--out", tmp.file("augmented.kcache")}, 2);
  ASSERT_EQ(r.rc, 0) << r.out;
  auto train = [&](const std::string& ckpt, std::vector<std::string> extra) {
    std::vector<std::string> args{FASHION_MNIST_PROG, "--train-limit", "512", "--batch", "32", "--checkpoint-every", "4",
                                  "--stop-after", "4", "--no-progress", "--checkpoint", tmp.file(ckpt)};
    args.insert(args.end(), extra.begin(), extra.end());
    auto t = run(args, 2);
    EXPECT_EQ(t.rc, 0) << t.out;
    auto p = run({READ_PROG, "--params", tmp.file(ckpt)}, 1);
    EXPECT_EQ(p.rc, 0) << p.out;
    return p.out;
  };
  const std::string idx = train("idx.ckpt", {});
  const std::string plain = train("plain.ckpt", {"--cache", tmp.file("plain.kcache")});
  const std::string augmented = train("augmented.ckpt", {"--cache", tmp.file("augmented.kcache")});
  EXPECT_NE(idx.find("param f2.bias"), std::string::npos) << idx;
  EXPECT_EQ(plain, idx) << "training from the plain cache differs from training from the IDX files";
  EXPECT_NE(augmented, idx) << "the augmented cache trained like the plain images";
}
