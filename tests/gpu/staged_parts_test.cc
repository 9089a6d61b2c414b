// The host data plane's pipeline bookkeeping (transport/staged_parts.h), on
// the CPU: parts cover the buffer exactly once, and run_staged() queues every
// download first, runs each part's collective only after its own download has
// landed and before its upload, and waits for the uploads. The copies here are
// real asynchronous copies on host threads that land out of order; on the
// GPU machine the host plane runs the same code with CUDA copies
// (gpu.collectives.*.host, .np3.host-parts).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "transport/staged_parts.h"

namespace kolo::gpu {
namespace {

TEST(StagedParts, CoverTheBufferOnce) {
  for (std::size_t count : {0, 1, 2, 7, 64, 65, 1000, 1001}) {
    for (std::size_t per : {1, 2, 3, 64, 1000, 5000}) {
      const Parts p{count, per};
      std::size_t next = 0;
      for (std::size_t i = 0; i < p.number(); ++i) {
        EXPECT_EQ(p.first(i), next) << count << "/" << per << " part " << i;
        EXPECT_GE(p.size(i), 1u);
        EXPECT_LE(p.size(i), per);
        next += p.size(i);
      }
      EXPECT_EQ(next, count) << count << "/" << per;
    }
  }
}

// Downloads land on threads of their own after a random delay (so out of
// order); the collective doubles each element; uploads are copies on threads
// too, joined by uploaded().
struct ThreadStages {
  const std::vector<int>& device_in;
  std::vector<int>& host;
  std::vector<int>& device_out;
  std::vector<std::thread> downloads, uploads;
  std::vector<std::atomic<bool>> landed;
  std::vector<std::string> log;
  std::mt19937 random{7};

  ThreadStages(const std::vector<int>& in, std::vector<int>& h, std::vector<int>& out, std::size_t parts)
      : device_in(in), host(h), device_out(out), landed(parts) {}

  void download(std::size_t i, std::size_t first, std::size_t n) {
    log.push_back("download " + std::to_string(i));
    const auto delay = std::chrono::milliseconds(random() % 20);
    downloads.emplace_back([this, i, first, n, delay] {
      std::this_thread::sleep_for(delay);
      std::memcpy(host.data() + first, device_in.data() + first, n * sizeof(int));
      landed[i] = true;
    });
  }
  void downloaded(std::size_t i, std::size_t, std::size_t) {
    downloads[i].join();
    log.push_back("downloaded " + std::to_string(i));
  }
  void collective(std::size_t i, std::size_t first, std::size_t n) {
    log.push_back("collective " + std::to_string(i));
    // A part whose download had not landed would be reduced from stale bytes.
    EXPECT_TRUE(landed[i].load()) << "part " << i;
    for (std::size_t k = first; k < first + n; ++k) host[k] *= 2;
  }
  void upload(std::size_t i, std::size_t first, std::size_t n) {
    log.push_back("upload " + std::to_string(i));
    uploads.emplace_back([this, first, n] {
      std::memcpy(device_out.data() + first, host.data() + first, n * sizeof(int));
    });
  }
  void uploaded() {
    for (auto& u : uploads) u.join();
    log.push_back("uploaded");
  }
};

TEST(StagedParts, EachPartDownloadedReducedUploaded) {
  const std::size_t count = 1003, per = 100;
  const Parts parts{count, per};
  std::vector<int> in(count), host(count, -1), out(count, -1);
  std::iota(in.begin(), in.end(), 1);
  ThreadStages stages(in, host, out, parts.number());
  run_staged(parts, true, stages);
  for (std::size_t k = 0; k < count; ++k) ASSERT_EQ(out[k], 2 * in[k]) << "element " << k;

  // Every download queued before the first collective; then per part:
  // downloaded, collective, upload; the uploads waited for last.
  std::vector<std::string> want;
  for (std::size_t i = 0; i < parts.number(); ++i) want.push_back("download " + std::to_string(i));
  for (std::size_t i = 0; i < parts.number(); ++i)
    for (const char* step : {"downloaded ", "collective ", "upload "}) want.push_back(step + std::to_string(i));
  want.push_back("uploaded");
  EXPECT_EQ(stages.log, want);
}

// A broadcast's non-root reads nothing from its device: no download, the
// collective fills the host buffer (here: it already holds the root's data).
TEST(StagedParts, WithoutDownload) {
  const std::size_t count = 250;
  const Parts parts{count, 64};
  std::vector<int> in(count, 0), host(count, 21), out(count, -1);
  ThreadStages stages(in, host, out, parts.number());
  for (auto& l : stages.landed) l = true;  // nothing to wait for
  run_staged(parts, false, stages);
  for (std::size_t k = 0; k < count; ++k) ASSERT_EQ(out[k], 42) << "element " << k;
  for (const auto& line : stages.log) EXPECT_EQ(line.rfind("download", 0), std::string::npos) << line;
}

}  // namespace
}  // namespace kolo::gpu
