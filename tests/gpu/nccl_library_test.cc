// NCCL loaded at run time (transport/cuda/nccl_library.h): the nccl plane
// must work where a framework or the toolkit provides libnccl, and say
// clearly why not where none does. Runs without a GPU: loading and resolving
// the library touches no device; forming a communicator (nccl_comm.h) then
// fails at once, with NCCL's reason — and succeeds where there is a GPU.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>

#include "transport/cuda/nccl_comm.h"
#include "transport/cuda/nccl_library.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define KOLO_TEST_HAS_NCCL_H 1
#endif

namespace {

using kolo::gpu::nccl::load;
namespace nccl = kolo::gpu::nccl;

#ifdef KOLO_TEST_HAS_NCCL_H
// kolo's copy of NCCL 2.14's config against the toolkit's nccl.h: the fields
// kolo sets where NCCL reads them, NCCL's magic, its "undefined".
static_assert(sizeof(nccl::Config) == 24);
static_assert(offsetof(nccl::Config, magic) == offsetof(ncclConfig_t, magic));
static_assert(offsetof(nccl::Config, version) == offsetof(ncclConfig_t, version));
static_assert(offsetof(nccl::Config, blocking) == offsetof(ncclConfig_t, blocking));
static_assert(offsetof(nccl::Config, tail) == offsetof(ncclConfig_t, cgaClusterSize));
static_assert(nccl::kUndefined == NCCL_CONFIG_UNDEF_INT);
static_assert(nccl::kInProgress == ncclInProgress && nccl::kInternalError == ncclInternalError);

TEST(NcclLibrary, ConfigIsNcclsOwnInitializerAsOf214) {
  const ncclConfig_t theirs = NCCL_CONFIG_INITIALIZER;
  const nccl::Config ours;
  EXPECT_EQ(ours.magic, theirs.magic);
  EXPECT_EQ(ours.version, static_cast<unsigned>(NCCL_VERSION(2, 14, 0)));
  EXPECT_EQ(ours.blocking, theirs.blocking);
  EXPECT_EQ(ours.tail, theirs.cgaClusterSize);
}
#endif

TEST(NcclLibrary, MissingFileSaysWhichAndWhy) {
  std::string why;
  EXPECT_EQ(load("/nonexistent/libnccl.so.2", why), nullptr);
  EXPECT_NE(why.find("cannot load /nonexistent/libnccl.so.2: "), std::string::npos) << why;
}

TEST(NcclLibrary, ALibraryThatIsNotNcclIsRefused) {
  std::string why;
  EXPECT_EQ(load("libm.so.6", why), nullptr);
  EXPECT_EQ(why, "libm.so.6 is not NCCL 2.x: it has no ncclGetVersion");
}

// The CUDA toolkit's NCCL (CMake found it beside the toolkit; CI's machine
// has it) or, on the GPU machine, torch's: KOLO_TEST_NCCL names it.
class ToolkitNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* p = std::getenv("KOLO_TEST_NCCL");
    if (p == nullptr || *p == '\0') GTEST_SKIP() << "no NCCL beside the CUDA toolkit";
    path = p;
    std::string why;
    lib = load(path, why);
    ASSERT_NE(lib, nullptr) << why;
  }
  std::string path;
  std::unique_ptr<nccl::Library> lib;
};

TEST_F(ToolkitNccl, LoadsWithEveryFunction) {
  EXPECT_GE(lib->version, 21000);
  EXPECT_EQ(lib->path, path);
  for (const void* fn : {reinterpret_cast<const void*>(lib->get_unique_id),
                         reinterpret_cast<const void*>(lib->comm_init_rank),
                         reinterpret_cast<const void*>(lib->all_reduce), reinterpret_cast<const void*>(lib->send),
                         reinterpret_cast<const void*>(lib->group_end)})
    EXPECT_NE(fn, nullptr);
  EXPECT_STREQ(lib->get_error_string(0), "no error");
  // 2.14's non-blocking communicator (the toolkit's NCCL is newer).
  EXPECT_NE(lib->comm_init_rank_config, nullptr);
  EXPECT_NE(lib->comm_finalize, nullptr);
  EXPECT_NE(lib->get_last_error, nullptr);
}

// A communicator of one rank: without a GPU NCCL refuses it at once and says
// why (no hang, nothing left to free); with one it forms and is let go.
TEST_F(ToolkitNccl, FormsACommunicatorWithinItsLimit) {
  nccl::UniqueId id{};
  ASSERT_EQ(lib->get_unique_id(&id), nccl::kSuccess);
  int gpus = 0;
  const bool has_gpu = cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0;
  (void)cudaGetLastError();

  const auto start = std::chrono::steady_clock::now();
  nccl::Comm comm = nullptr;
  bool nonblocking = false;
  const nccl::Result r = nccl::form(*lib, &comm, 1, id, 0, std::chrono::seconds(60), &nonblocking);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_TRUE(nonblocking);
  if (has_gpu) {
    ASSERT_EQ(r, nccl::kSuccess) << nccl::describe(*lib, r);
    ASSERT_NE(comm, nullptr);
    nccl::finish(*lib, comm, nonblocking, std::chrono::seconds(10));
  } else {
    EXPECT_NE(r, nccl::kSuccess);
    EXPECT_NE(r, nccl::kInProgress);
    EXPECT_EQ(comm, nullptr);
    const std::string words = nccl::describe(*lib, r);
    EXPECT_NE(words.find(lib->get_error_string(r)), std::string::npos) << words;
    EXPECT_NE(words.find("NCCL's last error: "), std::string::npos) << words;  // which CUDA call failed
  }
}

}  // namespace
