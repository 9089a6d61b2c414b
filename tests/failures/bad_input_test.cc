// The bad input table: every misuse of the public API, and every broken
// launcher environment, is an error that names the problem, with its exact
// text asserted here. Errors raised on a rank start with "kolo rank R: ";
// errors raised before the rank is known (a broken environment) with "kolo: ".
//
// The same binary runs as 1 rank (ctest runs it directly: kolo::init() with
// no launcher variables gives a 1-rank communicator) and under kolorun -np 3
// (both transports), where roots, block sizes and allgatherv counts depend on
// the size. Every rank runs the same tests in the same order, so the good
// collectives between the bad calls line up across ranks.
//
// A bad argument is caught on the calling rank before anything is sent: no
// collective is started, the communicator stays usable and in step (tested).
//
// Rows that are not here:
//   - too-short raw buffers: a pointer does not know its allocation's size,
//     so kolo cannot tell (ASan finds such overruns: scripts/sanitizers.sh).
//     The std::vector overloads can, and are here (TooShortVectors); a rank
//     whose vector is shorter than the other ranks' is a count mismatch,
//     caught on every rank by the fingerprint check
//     (tests/collectives/mismatch_test.sh, case "vector").
//   - kolorun's usage errors (-np 0, no command, unknown flag, a command that
//     does not exist): tests/launcher/usage_test.cc.
//
// Also a child mode, used by the environment rows:
//   kolo_bad_input_test --init-child           init(), one allreduce, "ok"; or
//                                              "error: <what>" and exit 1
//   kolo_bad_input_test --init-child-uncaught  the same without a catch
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../common/error_of.h"
#include "kolo/kolo.h"

namespace {

kolo::Communicator g_comm;
std::string g_self;  // this binary, for the child processes

using kolo::DType;
using kolo::Op;

constexpr std::size_t kNegOne = static_cast<std::size_t>(-1);
constexpr std::size_t kMaxBytes = std::numeric_limits<std::int64_t>::max();

using kolo::test::error_of;

class BadInput : public testing::Test {
 protected:
  kolo::Communicator& comm = g_comm;
  const int R = g_comm.rank();
  const int S = g_comm.size();
  std::string P = "kolo rank " + std::to_string(R) + ": ";
  std::vector<float> a = std::vector<float>(64 * S, 1.0f);
  std::vector<float> b = std::vector<float>(64 * S, 1.0f);

  // After every test: the communicator still works and gives the right sum.
  void TearDown() override {
    std::vector<float> v(5, static_cast<float>(R + 1));
    ASSERT_EQ(error_of([&] { comm.allreduce(v); }), "(no error)");
    EXPECT_EQ(v[4], S * (S + 1) / 2.0f);
  }
};

TEST_F(BadInput, NullBuffers) {
  EXPECT_EQ(error_of([&] { comm.allreduce(nullptr, b.data(), 10, DType::F32, Op::Sum); }),
            P + "allreduce: input buffer is null but 40 bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.allreduce(a.data(), nullptr, 10, DType::F32, Op::Sum); }),
            P + "allreduce: output buffer is null but 40 bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.allreduce(static_cast<double*>(nullptr), 3); }),
            P + "allreduce: input buffer is null but 24 bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.broadcast(nullptr, 10, DType::F32, 0); }),
            P + "broadcast: data buffer is null but 40 bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.allgather(nullptr, b.data(), 10, DType::F32); }),
            P + "allgather: input buffer is null but 40 bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.allgather(a.data(), nullptr, 10, DType::F32); }),
            P + "allgather: output buffer is null but " + std::to_string(40 * S) + " bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.allgatherv(a.data(), nullptr, std::vector<std::size_t>(S, 2), DType::F64); }),
            P + "allgatherv: output buffer is null but " + std::to_string(16 * S) + " bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.reduce_scatter(nullptr, b.data(), 10, DType::F32, Op::Sum); }),
            P + "reduce_scatter: input buffer is null but " + std::to_string(40 * S) + " bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.reduce_scatter(a.data(), nullptr, 10, DType::F32, Op::Sum); }),
            P + "reduce_scatter: output buffer is null but 40 bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.alltoall(a.data(), nullptr, 10, DType::F32); }),
            P + "alltoall: output buffer is null but " + std::to_string(40 * S) + " bytes were asked for");
  // The asynchronous calls check before they queue anything.
  EXPECT_EQ(error_of([&] { comm.allreduce_async(nullptr, nullptr, 1, DType::F32, Op::Sum); }),
            P + "allreduce: input buffer is null but 4 bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.broadcast_async(nullptr, 1, DType::U8, 0); }),
            P + "broadcast: data buffer is null but 1 bytes were asked for");
}

TEST_F(BadInput, TooShortVectors) {
  const std::string ranks = " on " + std::to_string(S) + " ranks";
  std::vector<float> in(10, 1.0f), short_out(9), out;
  EXPECT_EQ(error_of([&] { comm.allreduce(in, short_out); }),
            P + "allreduce: the output vector holds 9 elements but 10 are needed" + ranks);
  short_out.assign(10 * S - 1, 0.0f);
  EXPECT_EQ(error_of([&] { comm.allgather(in, short_out); }),
            P + "allgather: the output vector holds " + std::to_string(10 * S - 1) + " elements but " +
                std::to_string(10 * S) + " are needed" + ranks);
  out.assign(4, 0.0f);
  std::vector<float> short_in(4 * S - 1, 1.0f);
  EXPECT_EQ(error_of([&] { comm.reduce_scatter(short_in, out); }),
            P + "reduce_scatter: the input vector holds " + std::to_string(4 * S - 1) + " elements but " +
                std::to_string(4 * S) + " are needed" + ranks);
  std::vector<float> blocks(3 * S, 1.0f);
  short_out.assign(3 * S - 1, 0.0f);
  EXPECT_EQ(error_of([&] { comm.alltoall(blocks, short_out); }),
            P + "alltoall: the output vector holds " + std::to_string(3 * S - 1) + " elements but " +
                std::to_string(3 * S) + " are needed" + ranks);
  if (S > 1) {
    short_in.assign(3 * S + 1, 1.0f);
    EXPECT_EQ(error_of([&] { comm.alltoall(short_in, short_in); }),
              P + "alltoall: the input vector holds " + std::to_string(3 * S + 1) +
                  " elements, not a multiple of the " + std::to_string(S) + " ranks");
  }
  // Vectors of the right lengths work, with the right results.
  out.assign(10, 0.0f);
  ASSERT_EQ(error_of([&] { comm.allreduce(in, out); }), "(no error)");
  EXPECT_EQ(out, std::vector<float>(10, static_cast<float>(S)));
  std::vector<std::int32_t> mine(2, R), all(2 * S);
  ASSERT_EQ(error_of([&] { comm.allgather(mine, all); }), "(no error)");
  for (int r = 0; r < S; ++r) EXPECT_EQ(all[2 * r + 1], r);
  std::vector<double> v(3, R == 0 ? 7.0 : 0.0);
  ASSERT_EQ(error_of([&] { comm.broadcast(v, 0); }), "(no error)");
  EXPECT_EQ(v, std::vector<double>(3, 7.0));
  std::vector<float> rs_out(4);
  std::vector<float> rs_in(4 * S, 1.0f);
  ASSERT_EQ(error_of([&] { comm.reduce_scatter(rs_in, rs_out); }), "(no error)");
  EXPECT_EQ(rs_out, std::vector<float>(4, static_cast<float>(S)));
  std::vector<std::int64_t> to(3 * S), from(3 * S);
  for (int j = 0; j < S; ++j)
    for (int k = 0; k < 3; ++k) to[3 * j + k] = 100 * R + j;  // block j goes to rank j
  ASSERT_EQ(error_of([&] { comm.alltoall(to, from); }), "(no error)");
  for (int j = 0; j < S; ++j) EXPECT_EQ(from[3 * j], 100 * j + R);
}

TEST_F(BadInput, NullBufferWithZeroCountIsFine) {
  EXPECT_EQ(error_of([&] { comm.allreduce(nullptr, nullptr, 0, DType::F32, Op::Sum); }), "(no error)");
  EXPECT_EQ(error_of([&] { comm.broadcast(nullptr, 0, DType::F32, 0); }), "(no error)");
  EXPECT_EQ(error_of([&] { comm.allgather(nullptr, nullptr, 0, DType::F32); }), "(no error)");
  std::vector<float> empty;
  EXPECT_EQ(error_of([&] { comm.allreduce(empty); }), "(no error)");
}

TEST_F(BadInput, NegativeCounts) {
  // A negative int converted to size_t is a huge count: refused as such.
  const std::string neg = "count 18446744073709551615 is too large (negative, or overflows the byte size)";
  EXPECT_EQ(error_of([&] { comm.allreduce(a.data(), a.data(), kNegOne, DType::F32, Op::Sum); }),
            P + "allreduce: " + neg);
  const int n = -4;
  EXPECT_EQ(error_of([&] { comm.allreduce(a.data(), n); }),
            P + "allreduce: count 18446744073709551612 is too large (negative, or overflows the byte size)");
  EXPECT_EQ(error_of([&] { comm.broadcast(a.data(), kNegOne, DType::U8, 0); }), P + "broadcast: " + neg);
  EXPECT_EQ(error_of([&] { comm.allgather(a.data(), b.data(), kNegOne, DType::U8); }), P + "allgather: " + neg);
  EXPECT_EQ(error_of([&] { comm.allgatherv(a.data(), b.data(), std::vector<std::size_t>(S, kNegOne), DType::U8); }),
            P + "allgatherv: " + neg);
  EXPECT_EQ(error_of([&] { comm.reduce_scatter(a.data(), b.data(), kNegOne, DType::F32, Op::Sum); }),
            P + "reduce_scatter: " + neg);
  EXPECT_EQ(error_of([&] { comm.alltoall(a.data(), b.data(), kNegOne, DType::F32); }), P + "alltoall: " + neg);
  EXPECT_EQ(error_of([&] { comm.allreduce_async(a.data(), a.data(), kNegOne, DType::F32, Op::Sum); }),
            P + "allreduce: " + neg);
}

TEST_F(BadInput, OverflowingCounts) {
  // The largest count whose byte size fits in int64 passes the count check
  // (and then fails on the null buffer, which shows the exact byte size); one
  // more element does not.
  const std::size_t max_f64 = kMaxBytes / 8;
  EXPECT_EQ(error_of([&] { comm.allreduce(nullptr, nullptr, max_f64, DType::F64, Op::Sum); }),
            P + "allreduce: input buffer is null but " + std::to_string(max_f64 * 8) + " bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.allreduce(a.data(), a.data(), max_f64 + 1, DType::F64, Op::Sum); }),
            P + "allreduce: count " + std::to_string(max_f64 + 1) +
                " is too large (negative, or overflows the byte size)");
  // Block collectives: size()*count elements must fit too.
  const std::size_t max_block = kMaxBytes / 4 / S;
  for (auto [what, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"allgather", [&] { comm.allgather(a.data(), b.data(), max_block + 1, DType::F32); }},
           {"reduce_scatter", [&] { comm.reduce_scatter(a.data(), b.data(), max_block + 1, DType::F32, Op::Sum); }},
           {"alltoall", [&] { comm.alltoall(a.data(), b.data(), max_block + 1, DType::F32); }}}) {
    EXPECT_EQ(error_of(call), P + what + ": count " + std::to_string(max_block + 1) +
                                  " is too large (negative, or overflows the byte size)");
  }
  EXPECT_EQ(error_of([&] { comm.allgather(nullptr, nullptr, max_block, DType::F32); }),
            P + "allgather: input buffer is null but " + std::to_string(max_block * 4) + " bytes were asked for");
  // allgatherv: the output's size is the sum of the counts, exactly.
  std::vector<std::size_t> counts(S, max_block);
  EXPECT_EQ(error_of([&] { comm.allgatherv(a.data(), nullptr, counts, DType::F32); }),
            P + "allgatherv: output buffer is null but " + std::to_string(max_block * 4 * S) + " bytes were asked for");
}

TEST_F(BadInput, OpsADtypeDoesNotSupport) {
  std::vector<std::int32_t> i(4, 1);
  std::vector<std::int64_t> l(4, 1);
  std::vector<std::uint8_t> u(4 * S, 1);
  const std::string why = " (use a floating type, or sum and divide yourself)";
  EXPECT_EQ(error_of([&] { comm.allreduce(i, Op::Average); }),
            P + "allreduce: op average is not defined for i32" + why);
  EXPECT_EQ(error_of([&] { comm.allreduce(l.data(), l.data(), 4, DType::I64, Op::Average); }),
            P + "allreduce: op average is not defined for i64" + why);
  EXPECT_EQ(error_of([&] { comm.reduce_scatter(u.data(), u.data(), 4, DType::U8, Op::Average); }),
            P + "reduce_scatter: op average is not defined for u8" + why);
  EXPECT_EQ(error_of([&] { comm.allreduce_async(i.data(), i.data(), 4, DType::I32, Op::Average); }),
            P + "allreduce: op average is not defined for i32" + why);
  // Values outside the enums (a cast from a bad integer).
  EXPECT_EQ(error_of([&] { comm.allreduce(a.data(), a.data(), 4, DType::F32, static_cast<Op>(9)); }),
            P + "allreduce: invalid op value 9");
  EXPECT_EQ(error_of([&] { comm.allreduce(a.data(), a.data(), 4, static_cast<DType>(42), Op::Sum); }),
            P + "allreduce: invalid dtype value 42");
  EXPECT_EQ(error_of([&] { comm.broadcast(a.data(), 4, static_cast<DType>(200), 0); }),
            P + "broadcast: invalid dtype value 200");
  EXPECT_EQ(error_of([&] { comm.alltoall(a.data(), b.data(), 4, static_cast<DType>(7)); }),
            P + "alltoall: invalid dtype value 7");
  // Supported pairs really work: average on f32, sum and max on integers.
  EXPECT_EQ(error_of([&] { comm.allreduce(i, Op::Max); }), "(no error)");
}

TEST_F(BadInput, InvalidRoot) {
  for (int root : {-1, S, S + 7, std::numeric_limits<int>::min()}) {
    EXPECT_EQ(error_of([&] { comm.broadcast(a.data(), 4, DType::F32, root); }),
              P + "broadcast: root " + std::to_string(root) + " is not a rank of this communicator (size " +
                  std::to_string(S) + ")");
  }
  EXPECT_EQ(error_of([&] { comm.broadcast_async(a.data(), 4, DType::F32, S); }),
            P + "broadcast: root " + std::to_string(S) + " is not a rank of this communicator (size " +
                std::to_string(S) + ")");
}

TEST_F(BadInput, AllgathervCountsOfTheWrongLength) {
  for (std::size_t n : {std::size_t{0}, static_cast<std::size_t>(S) + 1, static_cast<std::size_t>(S) * 2}) {
    EXPECT_EQ(error_of([&] { comm.allgatherv(a.data(), b.data(), std::vector<std::size_t>(n, 1), DType::F32); }),
              P + "allgatherv: counts has " + std::to_string(n) + " entries but the communicator has " +
                  std::to_string(S) + " ranks");
  }
  EXPECT_EQ(error_of([&] { comm.allgatherv_async(a.data(), b.data(), {}, DType::F32); }),
            P + "allgatherv: counts has 0 entries but the communicator has " + std::to_string(S) + " ranks");
}

TEST_F(BadInput, OverlappingBuffers) {
  float* x = a.data();
  EXPECT_EQ(error_of([&] { comm.allreduce(x, x + 1, 8, DType::F32, Op::Sum); }),
            P + "allreduce: input and output overlap without being the same buffer");
  EXPECT_EQ(error_of([&] { comm.allreduce(x + 7, x, 8, DType::F32, Op::Sum); }),
            P + "allreduce: input and output overlap without being the same buffer");
  const std::string ag = P + "allgather: input overlaps the output other than at this rank's block "
                             "(in place means in == out + offset of rank " + std::to_string(R) + ")";
  EXPECT_EQ(error_of([&] { comm.allgather(x + 4 * R + 1, x, 4, DType::F32); }), ag);
  if (R > 0) {
    EXPECT_EQ(error_of([&] { comm.allgather(x, x, 4, DType::F32); }), ag);
  }
  EXPECT_EQ(error_of([&] { comm.reduce_scatter(x, x + 4 * R + 2, 4, DType::F32, Op::Sum); }),
            P + "reduce_scatter: output overlaps the input other than at this rank's block "
                "(in place means out == in + offset of rank " + std::to_string(R) + ")");
  EXPECT_EQ(error_of([&] { comm.alltoall(x, x, 4, DType::F32); }), P + "alltoall: input and output must not overlap");
  EXPECT_EQ(error_of([&] { comm.alltoall(x, x + 4 * S - 1, 4, DType::F32); }),
            P + "alltoall: input and output must not overlap");
  // Where in place is allowed, it works.
  EXPECT_EQ(error_of([&] { comm.allreduce(x, x, 8, DType::F32, Op::Sum); }), "(no error)");
  for (int i = 0; i < 4 * S; ++i) x[i] = static_cast<float>(i / 4);
  EXPECT_EQ(error_of([&] { comm.allgather(x + 4 * R, x, 4, DType::F32); }), "(no error)");
  for (int i = 0; i < 4 * S; ++i) ASSERT_EQ(x[i], static_cast<float>(i / 4)) << i;
  EXPECT_EQ(error_of([&] { comm.reduce_scatter(x, x + 4 * R, 4, DType::F32, Op::Sum); }), "(no error)");
  EXPECT_EQ(x[4 * R], static_cast<float>(R * S));
}

// alltoallv's counts and offsets, checked on the calling rank. (Counts that
// disagree between ranks are caught inside the collective, on every rank:
// tests/collectives/mismatch_test.sh, case "alltoallv".)
TEST_F(BadInput, AlltoallvArguments) {
  const auto n = static_cast<std::size_t>(S);
  const std::string ranks = std::to_string(S) + " ranks";
  const std::vector<std::size_t> ones(n, 1);
  auto call = [&](const std::vector<std::size_t>& sc, const std::vector<std::size_t>& so,
                  const std::vector<std::size_t>& rc, const std::vector<std::size_t>& ro) {
    return error_of([&] { comm.alltoallv(a.data(), sc, so, b.data(), rc, ro, DType::F32); });
  };
  EXPECT_EQ(call(std::vector<std::size_t>(n + 1, 1), {}, ones, {}),
            P + "alltoallv: send counts has " + std::to_string(n + 1) + " entries but the communicator has " + ranks);
  EXPECT_EQ(call(ones, {}, {}, {}), P + "alltoallv: receive counts has 0 entries but the communicator has " + ranks);
  EXPECT_EQ(call(ones, {}, ones, {0, 1, 2, 3, 4, 5, 6, 7, 8}),
            P + "alltoallv: receive offsets has 9 entries but the communicator has " + ranks +
                " (or pass none: blocks packed in rank order)");
  std::vector<std::size_t> neg = ones;
  neg[0] = kNegOne;
  EXPECT_EQ(call(neg, {}, ones, {}), P + "alltoallv: send block 0 (" + std::to_string(kNegOne) +
                                         " elements from element 0) is too large (negative, or overflows the byte size)");
  std::vector<std::size_t> far(n, 0);
  far[n - 1] = kMaxBytes / 4;
  EXPECT_EQ(call(ones, {}, ones, far),
            P + "alltoallv: receive block " + std::to_string(n - 1) + " (1 elements from element " +
                std::to_string(kMaxBytes / 4) + ") is too large (negative, or overflows the byte size)");
  if (S > 1) {
    std::vector<std::size_t> two(n, 2), offsets(n);
    for (std::size_t j = 0; j < n; ++j) offsets[j] = 2 * j;
    offsets[1] = 1;
    EXPECT_EQ(call(ones, {}, two, offsets), P + "alltoallv: receive blocks 0 (elements 0..2) and 1 (elements 1..3) overlap");
  }
  EXPECT_EQ(error_of([&] { comm.alltoallv(a.data(), ones, {}, a.data(), ones, {}, DType::F32); }),
            P + "alltoallv: input and output must not overlap");
  EXPECT_EQ(error_of([&] { comm.alltoallv_async(a.data(), ones, {}, nullptr, ones, {}, DType::F32); }),
            P + "alltoallv: output buffer is null but " + std::to_string(4 * S) + " bytes were asked for");
  EXPECT_EQ(error_of([&] { comm.alltoallv(a.data(), ones, {}, b.data(), ones, {}, DType::F32, kolo::Place::cuda(0)); }),
            P + "alltoallv: buffers in CUDA memory are not supported yet (alltoall's equal blocks are); stage them "
                "in host memory");
  EXPECT_EQ(error_of([&] { comm.alltoallv(std::vector<float>(n + 1), ones); }),
            P + "alltoallv: the input vector holds " + std::to_string(n + 1) + " elements but the send counts add up to " +
                std::to_string(n));
  EXPECT_EQ(error_of([&] { comm.alltoallv_counts(std::vector<std::size_t>(n + 1, 1)); }),
            P + "alltoallv_counts: send counts has " + std::to_string(n + 1) + " entries but the communicator has " +
                ranks);
  EXPECT_EQ(error_of([&] { comm.alltoallv(a.data(), ones, {}, b.data(), ones, {}, static_cast<DType>(7)); }),
            P + "alltoallv: invalid dtype value 7");
  // Zero counts with null buffers are fine, and the call still runs on every rank.
  const std::vector<std::size_t> zeros(n, 0);
  EXPECT_EQ(error_of([&] { comm.alltoallv(nullptr, zeros, {}, nullptr, zeros, {}, DType::F32); }), "(no error)");
}

// CUDA memory (kolo::Place::cuda) where it cannot be used: a build without
// CUDA, a machine without a GPU (CI), or — on a GPU machine — a host buffer
// passed as CUDA memory. Each is caught before anything is queued.
TEST_F(BadInput, CudaMemoryThatCannotBeUsed) {
  const auto gpu = kolo::Place::cuda(0);
  EXPECT_EQ(comm.gpu_transport(), kolo::cuda_built() ? "host" : "none");
  const std::vector<std::pair<const char*, std::function<void()>>> calls = {
      {"allreduce", [&] { comm.allreduce(a.data(), b.data(), 4, DType::F32, Op::Sum, {}, gpu); }},
      {"allreduce", [&] { comm.allreduce_async(a.data(), a.data(), 4, DType::F32, Op::Sum, {}, gpu); }},
      {"broadcast", [&] { comm.broadcast(a.data(), 4, DType::F32, 0, {}, gpu); }},
      {"allgather", [&] { comm.allgather(a.data(), b.data(), 4, DType::F32, gpu); }},
      {"allgatherv", [&] { comm.allgatherv(a.data(), b.data(), std::vector<std::size_t>(S, 1), DType::F32, gpu); }},
      {"reduce_scatter", [&] { comm.reduce_scatter(a.data(), b.data(), 4, DType::F32, Op::Sum, {}, gpu); }},
      {"alltoall", [&] { comm.alltoall_async(a.data(), b.data(), 4, DType::F32, gpu); }},
  };
  for (const auto& [what, call] : calls) {
    const std::string e = error_of(call), head = P + what + ": ";
    if (!kolo::cuda_built()) {
      EXPECT_EQ(e, head + "the buffers are CUDA memory (Place::cuda), but this kolo was built without CUDA: "
                          "rebuild it where the CUDA toolkit is installed (CMake finds nvcc on PATH or in "
                          "/usr/local/cuda; -DKOLO_CUDA=ON makes its absence an error)");
    } else if (e.find("no CUDA device can be used") != std::string::npos) {
      EXPECT_TRUE(std::regex_match(e, std::regex(head + "the buffers are CUDA memory \\(cuda:0\\), but no CUDA "
                                                        "device can be used in this process: .+ \\(cuda\\w+\\)")))
          << e;
    } else {  // a GPU machine: the host buffer is refused
      EXPECT_TRUE(std::regex_match(e, std::regex(head + "the (input|data) buffer at 0x[0-9a-f]+ is host memory, but "
                                                        "the call says its buffers are CUDA memory of cuda:0")))
          << e;
    }
  }
}

// KOLO_GPU_TRANSPORT: which data plane serves CUDA memory (README "GPUs").
TEST_F(BadInput, GpuTransportSetting) {
  struct Restore {
    ~Restore() {
      unsetenv("KOLO_GPU_TRANSPORT");
      unsetenv("KOLO_NCCL_LIBRARY");
    }
  } restore;
  auto with = [&](const char* value) {
    setenv("KOLO_GPU_TRANSPORT", value, 1);
    return error_of([&] { (void)comm.gpu_transport(); });
  };
  if (!kolo::cuda_built()) {
    EXPECT_EQ(with("ipc"), "(no error)");  // nothing to choose from: "none"
    return;
  }
  setenv("KOLO_GPU_TRANSPORT", "ipc", 1);
  EXPECT_EQ(comm.gpu_transport(), "ipc");  // every rank of these runs is on this host
  setenv("KOLO_GPU_TRANSPORT", "host", 1);
  EXPECT_EQ(comm.gpu_transport(), "host");
  // NCCL that cannot be loaded (this process's first look at it): the host
  // plane serves, and a warning says why (nccl_library_test: the loading itself).
  setenv("KOLO_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  setenv("KOLO_GPU_TRANSPORT", "nccl", 1);
  EXPECT_EQ(comm.gpu_transport(), "host");
  EXPECT_EQ(with("gloo"), P + "KOLO_GPU_TRANSPORT=gloo is not a data plane (auto, host, ipc, nccl)");
}

TEST_F(BadInput, DefaultConstructedCommunicator) {
  kolo::Communicator none;
  EXPECT_FALSE(none.valid());
  const std::string msg = P + "this Communicator is not initialised; create it with kolo::init()";
  EXPECT_EQ(error_of([&] { none.rank(); }), msg);
  EXPECT_EQ(error_of([&] { none.size(); }), msg);
  EXPECT_EQ(error_of([&] { none.transport(); }), msg);
  EXPECT_EQ(error_of([&] { none.allreduce(a.data(), a.data(), 4, DType::F32, Op::Sum); }), msg);
  EXPECT_EQ(error_of([&] { none.allreduce_async(a.data(), a.data(), 4, DType::F32, Op::Sum); }), msg);
  EXPECT_EQ(error_of([&] { none.broadcast(a.data(), 4, DType::F32, 0); }), msg);
  EXPECT_EQ(error_of([&] { none.barrier(); }), msg);
  EXPECT_EQ(error_of([&] { none.barrier_async(); }), msg);
}

TEST_F(BadInput, EmptyWork) {
  kolo::Work w;
  EXPECT_FALSE(w.valid());
  EXPECT_EQ(error_of([&] { w.wait(); }), P + "wait() on an empty kolo::Work");
  EXPECT_EQ(error_of([&] { w.test(); }), P + "test() on an empty kolo::Work");
  // A real Work, waited for twice, is fine.
  kolo::Work real = comm.allreduce_async(a.data(), a.data(), 4, DType::F32, Op::Sum);
  EXPECT_TRUE(real.valid());
  EXPECT_EQ(error_of([&] { real.wait(); }), "(no error)");
  EXPECT_EQ(error_of([&] { real.wait(); }), "(no error)");
}

TEST_F(BadInput, AnErrorOnOneRankOnlyLeavesTheRanksInStep) {
  // Rank 0 makes a bad call the others do not make; no collective is started,
  // so the next collective pairs up with the others' as usual (TearDown).
  if (R == 0) {
    EXPECT_EQ(error_of([&] { comm.broadcast(a.data(), 4, DType::F32, S); }),
              P + "broadcast: root " + std::to_string(S) + " is not a rank of this communicator (size " +
                  std::to_string(S) + ")");
  }
}

// ---- the launcher environment, through a real process -------------------------

struct Child {
  int code = -1;    // exit code, or 128+signal
  std::string err;  // its stderr
  std::string out;
};

// Runs `argv` with exactly `env` (plus PATH), stdout/stderr to files; kills it after 60 s.
Child run_child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  char tmpl[] = "/tmp/kolo-bad-input-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string out = dir + "/out", err = dir + "/err";
  std::vector<std::string> env_s = {"PATH=/usr/bin:/bin"};
  for (auto& [k, v] : env) env_s.push_back(k + "=" + v);
  std::vector<char*> av, ev;
  for (auto& s : argv) av.push_back(const_cast<char*>(s.c_str()));
  for (auto& s : env_s) ev.push_back(const_cast<char*>(s.c_str()));
  av.push_back(nullptr);
  ev.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execve(av[0], av.data(), ev.data());
    ::_exit(127);
  }
  Child c;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << argv[0] << " still running after 60 s; killed";
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::stringstream so, se;
  so << std::ifstream(out).rdbuf();
  se << std::ifstream(err).rdbuf();
  c.out = so.str();
  c.err = se.str();
  std::remove(out.c_str());
  std::remove(err.c_str());
  ::rmdir(dir.c_str());
  return c;
}

struct EnvRow {
  const char* name;
  std::map<std::string, std::string> env;
  std::string error;  // the whole of the child's stderr line after "error: "
};

void PrintTo(const EnvRow& r, std::ostream* os) { *os << r.name; }

class Environment : public testing::TestWithParam<EnvRow> {
 protected:
  void SetUp() override {
    if (g_comm.size() > 1) GTEST_SKIP() << "environment rows run in the 1-rank run";
  }
};

TEST_P(Environment, InitFailsNamingTheVariable) {
  const EnvRow& row = GetParam();
  Child c = run_child({g_self, "--init-child"}, row.env);
  EXPECT_EQ(c.code, 1) << c.err;
  EXPECT_EQ(c.err, "error: " + row.error + "\n");
  EXPECT_EQ(c.out, "");
}

INSTANTIATE_TEST_SUITE_P(
    BadInput, Environment,
    testing::Values(
        EnvRow{"rank_without_size", {{"KOLO_RANK", "0"}},
               "kolo: rendezvous: KOLO_RANK is set but KOLO_SIZE is not (kolo environment)"},
        EnvRow{"size_without_rank", {{"KOLO_SIZE", "2"}},
               "kolo: rendezvous: KOLO_SIZE is set but KOLO_RANK is not (kolo environment)"},
        EnvRow{"rank_equal_to_size", {{"KOLO_RANK", "2"}, {"KOLO_SIZE", "2"}},
               "kolo: rendezvous: KOLO_RANK=2 is not below KOLO_SIZE=2"},
        EnvRow{"rank_above_size", {{"KOLO_RANK", "7"}, {"KOLO_SIZE", "4"}, {"KOLO_STORE_ADDR", "127.0.0.1:9"}},
               "kolo: rendezvous: KOLO_RANK=7 is not below KOLO_SIZE=4"},
        EnvRow{"negative_rank", {{"KOLO_RANK", "-1"}, {"KOLO_SIZE", "2"}},
               "kolo: rendezvous: KOLO_RANK=-1 must not be negative"},
        EnvRow{"size_zero", {{"KOLO_RANK", "0"}, {"KOLO_SIZE", "0"}},
               "kolo: rendezvous: KOLO_SIZE=0 must be at least 1"},
        EnvRow{"rank_not_a_number", {{"KOLO_RANK", "one"}, {"KOLO_SIZE", "2"}},
               "kolo: rendezvous: KOLO_RANK=one is not an integer"},
        EnvRow{"local_rank_without_local_size", {{"KOLO_RANK", "0"}, {"KOLO_SIZE", "1"}, {"KOLO_LOCAL_RANK", "0"}},
               "kolo: rendezvous: KOLO_LOCAL_RANK is set but KOLO_LOCAL_SIZE is not (kolo environment)"},
        EnvRow{"local_rank_above_local_size",
               {{"KOLO_RANK", "0"}, {"KOLO_SIZE", "2"}, {"KOLO_LOCAL_RANK", "2"}, {"KOLO_LOCAL_SIZE", "2"}},
               "kolo: rendezvous: KOLO_LOCAL_RANK=2 is not below KOLO_LOCAL_SIZE=2"},
        EnvRow{"bad_store_address", {{"KOLO_RANK", "0"}, {"KOLO_SIZE", "1"}, {"KOLO_STORE_ADDR", "nohost"}},
               "kolo: rendezvous: KOLO_STORE_ADDR=nohost is not host:port with a port in 1-65535"},
        EnvRow{"torchrun_rank_above_world_size",
               {{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29999"}},
               "kolo: rendezvous: RANK=4 is not below WORLD_SIZE=4"},
        EnvRow{"torchrun_master_addr_without_port", {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}},
               "kolo: rendezvous: MASTER_ADDR is set but MASTER_PORT is not (torchrun environment)"},
        EnvRow{"openmpi_rank_without_size", {{"OMPI_COMM_WORLD_RANK", "0"}},
               "kolo: rendezvous: OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not (openmpi environment)"},
        EnvRow{"slurm_size_without_rank", {{"SLURM_NTASKS", "4"}},
               "kolo: rendezvous: SLURM_NTASKS is set but SLURM_PROCID is not (slurm environment)"}),
    [](const testing::TestParamInfo<EnvRow>& i) { return std::string(i.param.name); });

TEST(BadEnvironment, ControlRowsWork) {
  if (g_comm.size() > 1) GTEST_SKIP() << "environment rows run in the 1-rank run";
  Child c = run_child({g_self, "--init-child"}, {{"KOLO_RANK", "0"}, {"KOLO_SIZE", "1"}});
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.out, "ok rank 0 size 1\n");
  c = run_child({g_self, "--init-child"}, {});
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.out, "ok rank 0 size 1\n");
}

TEST(BadEnvironment, UncaughtErrorStillShowsTheMessage) {
  if (g_comm.size() > 1) GTEST_SKIP() << "environment rows run in the 1-rank run";
  Child c = run_child({g_self, "--init-child-uncaught"}, {{"KOLO_RANK", "0"}});
  EXPECT_EQ(c.code, 128 + SIGABRT);
  EXPECT_NE(c.err.find("kolo: rendezvous: KOLO_RANK is set but KOLO_SIZE is not (kolo environment)"),
            std::string::npos)
      << c.err;
}

TEST(BadEnvironment, RanksThatNeverArriveAreNamed) {
  // Rank 0 of 2 alone: the rendezvous gives up after its timeout and names
  // the rank that never came.
  if (g_comm.size() > 1) GTEST_SKIP() << "environment rows run in the 1-rank run";
  Child c = run_child({g_self, "--init-child"},
                      {{"KOLO_RANK", "0"}, {"KOLO_SIZE", "2"}, {"KOLO_RENDEZVOUS_TIMEOUT_MS", "2000"},
                       {"KOLO_JOB_ID", "bad-input-" + std::to_string(::getpid())}});
  EXPECT_EQ(c.code, 1) << c.err;
  EXPECT_EQ(c.err.rfind("error: kolo rank 0: ", 0), 0u) << c.err;
  EXPECT_TRUE(std::regex_search(c.err, std::regex("ranks? 1 (did not|never)"))) << c.err;
  EXPECT_EQ(c.out, "");
}

#ifdef KOLORUN_PATH
TEST(BadEnvironment, TunablesThatDoNotParse) {
  // Under kolorun, so that init() gets as far as reading them on every rank.
  if (g_comm.size() > 1) GTEST_SKIP() << "environment rows run in the 1-rank run";
  for (auto [var, value, error] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"KOLO_TRANSPORT", "carrier-pigeon", "KOLO_TRANSPORT=carrier-pigeon is not a transport (auto, shm, tcp)"},
           {"KOLO_TIMEOUT_MS", "soon", "KOLO_TIMEOUT_MS=soon is not an integer"}}) {
    Child c = run_child({KOLORUN_PATH, "-np", "2", g_self, "--init-child"}, {{var, value}});
    EXPECT_EQ(c.code, 1) << c.err;
    // The first rank to fail is reported; kolorun's teardown may stop the
    // other before it gets as far, so at least one rank's line is required
    // and every rank's error line must be exact.
    int lines = 0;
    for (int r = 0; r < 2; ++r) {
      const std::string tag = "[" + std::to_string(r) + "] error: ";
      const std::size_t at = c.err.find(tag);
      if (at == std::string::npos) continue;
      ++lines;
      const std::string line = c.err.substr(at, c.err.find('\n', at) - at);
      EXPECT_EQ(line, tag + "kolo rank " + std::to_string(r) + ": " + error);
    }
    EXPECT_GE(lines, 1) << c.err;
    EXPECT_NE(c.err.find("with code 1 (first failure)"), std::string::npos) << c.err;
  }
}

#endif

int init_child(bool catch_errors) {
  auto body = [] {
    kolo::Communicator comm = kolo::init();
    int x = 1;
    comm.allreduce(&x, 1);
    std::printf("ok rank %d size %d\n", comm.rank(), x);
  };
  if (!catch_errors) {
    body();
    return 0;
  }
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--init-child") == 0) return init_child(true);
  if (argc > 1 && std::strcmp(argv[1], "--init-child-uncaught") == 0) return init_child(false);
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  g_self = std::string(self, n > 0 ? n : 0);
  testing::InitGoogleTest(&argc, argv);
  g_comm = kolo::init();
  const int rc = RUN_ALL_TESTS();
  // Every rank must get here in step: a last collective shows it.
  try {
    g_comm.barrier();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "final barrier: %s\n", e.what());
    return 1;
  }
  return rc;
}
