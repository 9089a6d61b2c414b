// NCCL loaded at run time (transport/cuda/nccl_library.h): the nccl plane
// must work where a framework or the toolkit provides libnccl, and say
// clearly why not where none does. Runs without a GPU: loading and resolving
// the library touches no device.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "transport/cuda/nccl_library.h"

namespace {

using kolo::gpu::nccl::load;

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

// The CUDA toolkit's NCCL (CMake found it beside the toolkit; CI's machine has it).
TEST(NcclLibrary, TheToolkitsNcclLoadsWithEveryFunction) {
  const char* path = std::getenv("KOLO_TEST_NCCL");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "no NCCL beside the CUDA toolkit";
  std::string why;
  const auto lib = load(path, why);
  ASSERT_NE(lib, nullptr) << why;
  EXPECT_GE(lib->version, 21000);
  EXPECT_EQ(lib->path, path);
  for (const void* fn : {reinterpret_cast<const void*>(lib->get_unique_id),
                         reinterpret_cast<const void*>(lib->comm_init_rank),
                         reinterpret_cast<const void*>(lib->all_reduce), reinterpret_cast<const void*>(lib->send),
                         reinterpret_cast<const void*>(lib->group_end)})
    EXPECT_NE(fn, nullptr);
  EXPECT_STREQ(lib->get_error_string(0), "no error");
}

}  // namespace
