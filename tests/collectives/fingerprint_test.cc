// The fingerprint of a call says where its buffers live: ranks that pass host
// memory and CUDA memory to the same collective differ in it, and the
// mismatch error shows which did which. (The cross-rank check itself runs on
// a GPU: check_collectives --cuda.)
#include <gtest/gtest.h>

#include "core/fingerprint.h"
#include "core/rejected.h"

namespace kolo {
namespace {

TEST(Fingerprint, TheCallSaysWhereItsBuffersLive) {
  const Fingerprint host = fingerprint(Kind::Allreduce, DType::F32, 1000, Op::Sum);
  const Fingerprint cuda = on(host, Place::cuda(0));
  EXPECT_EQ(host.call(), "allreduce(f32, 1000, sum)");
  EXPECT_EQ(cuda.call(), "allreduce(f32, 1000, sum) on cuda");
  EXPECT_EQ(on(host, Place::host()), host);
  EXPECT_NE(host.digest(), cuda.digest());  // shared memory compares digests
  const Fingerprint shaped = on(with_shape(host, std::vector<std::int64_t>{10, 100}), Place::cuda(1));
  EXPECT_EQ(shaped.call(true).rfind("allreduce(f32, 1000, sum, shape hash ", 0), 0u) << shaped.call(true);
  EXPECT_TRUE(shaped.call(true).ends_with(") on cuda")) << shaped.call(true);
}

TEST(Fingerprint, HostAgainstCudaIsAMismatchNamingBoth) {
  Fingerprint mine = on(fingerprint(Kind::Broadcast, DType::F32, 8, Op::Sum, 0), Place::cuda(0));
  Fingerprint theirs = fingerprint(Kind::Broadcast, DType::F32, 8, Op::Sum, 0);
  mine.seq = theirs.seq = 3;
  try {
    fail_mismatch(mine, Fingerprint{}, "rank 0", theirs, "rank 1");
    FAIL() << "no error";
  } catch (const MismatchError& e) {
    EXPECT_TRUE(std::string(e.what()).ends_with(
        "mismatched collectives at collective #3: rank 1 called broadcast(f32, 8, root=0) while rank 0 (this rank) "
        "called broadcast(f32, 8, root=0) on cuda"))
        << e.what();
  }
}

}  // namespace
}  // namespace kolo
