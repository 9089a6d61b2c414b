// The fingerprint of a call says where its buffers live: ranks that pass host
// memory and CUDA memory to the same collective differ in it, and the
// mismatch error shows which did which; so do ranks whose data planes for
// CUDA memory differ. (The cross-rank check itself runs on a GPU:
// check_collectives --cuda.)
#include <gtest/gtest.h>

#include <string>

#include "core/fingerprint.h"
#include "core/rejected.h"

namespace kolo {
namespace {

// What rank 0 is told when it called `mine` as collective #3 and rank 1 `theirs`.
std::string mismatch(Fingerprint mine, Fingerprint theirs) {
  mine.seq = theirs.seq = 3;
  try {
    fail_mismatch(mine, Fingerprint{}, "rank 0", theirs, "rank 1");
  } catch (const MismatchError& e) {
    return e.what();
  }
  return "no error";
}

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
  const Fingerprint host = fingerprint(Kind::Broadcast, DType::F32, 8, Op::Sum, 0);
  const std::string text = mismatch(on(host, Place::cuda(0)), host);
  EXPECT_TRUE(text.ends_with("mismatched collectives at collective #3: rank 1 called broadcast(f32, 8, root=0) "
                             "while rank 0 (this rank) called broadcast(f32, 8, root=0) on cuda"))
      << text;
}

// KOLO_GPU_TRANSPORT=nccl where NCCL loads on some ranks only: those serve
// with the host plane, and every rank must get this error instead of another
// plane's protocol.
TEST(Fingerprint, DifferentDataPlanesAreAMismatchNamingBoth) {
  const Fingerprint call = fingerprint(Kind::Allreduce, DType::F32, 16, Op::Sum);
  const Fingerprint mine = on(call, Place::cuda(0), PlaneCode::Nccl);
  const Fingerprint theirs = on(call, Place::cuda(0), PlaneCode::Host);
  EXPECT_EQ(mine.call(), "allreduce(f32, 16, sum) on cuda via nccl");
  EXPECT_NE(mine, theirs);
  EXPECT_NE(mine.digest(), theirs.digest());
  EXPECT_EQ(on(call, Place::cuda(0), PlaneCode::Ipc), on(call, Place::cuda(1), PlaneCode::Ipc));
  const std::string text = mismatch(mine, theirs);
  EXPECT_TRUE(text.ends_with("rank 1 called allreduce(f32, 16, sum) on cuda via host while rank 0 (this rank) "
                             "called allreduce(f32, 16, sum) on cuda via nccl"))
      << text;
}

}  // namespace
}  // namespace kolo
