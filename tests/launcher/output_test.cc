// Output relay: every line of every rank arrives once, whole, in order, with
// its rank's prefix and on the stream it was written to.
#include <algorithm>
#include <string>
#include <vector>

#include "launcher_test_util.h"

namespace kolotest {
namespace {

std::vector<std::string> expected_lines(const std::string& stream, int rank, int k) {
  std::vector<std::string> v;
  for (int i = 0; i < k; ++i) v.push_back(stream + " " + std::to_string(rank) + " " + std::to_string(i));
  return v;
}

TEST(Output, EachLineTaggedWithItsRankOnItsOwnStream) {
  const int np = 3, k = 5;
  Outcome o = run_kolorun({"-np", std::to_string(np), "--tag-output", rank_prog(), "lines", std::to_string(k)});
  ASSERT_EQ(o.code, 0) << o.err;
  auto out = split_lines(o.out), err = split_lines(o.err);
  EXPECT_EQ(out.size(), static_cast<std::size_t>(np * k)) << o.out;
  EXPECT_EQ(err.size(), static_cast<std::size_t>(np * k)) << o.err;
  for (int r = 0; r < np; ++r) {
    const std::string tag = "[" + std::to_string(r) + "] ";
    EXPECT_EQ(with_prefix(out, tag), expected_lines("out", r, k)) << o.out;
    EXPECT_EQ(with_prefix(err, tag), expected_lines("err", r, k)) << o.err;
  }
}

TEST(Output, ManyLinesFromManyRanksStayWholeAndInOrder) {
  const int np = 4, k = 2000;
  Outcome o = run_kolorun({"-np", std::to_string(np), rank_prog(), "lines", std::to_string(k)}, 60);
  ASSERT_EQ(o.code, 0) << o.err.substr(0, 2000);
  auto out = split_lines(o.out), err = split_lines(o.err);
  ASSERT_EQ(out.size(), static_cast<std::size_t>(np * k));
  ASSERT_EQ(err.size(), static_cast<std::size_t>(np * k));
  for (int r = 0; r < np; ++r) {
    const std::string tag = "[" + std::to_string(r) + "] ";
    EXPECT_EQ(with_prefix(out, tag), expected_lines("out", r, k)) << "rank " << r;
    EXPECT_EQ(with_prefix(err, tag), expected_lines("err", r, k)) << "rank " << r;
  }
}

TEST(Output, NoTagOutputRelaysLinesAsWritten) {
  const int np = 2, k = 3;
  Outcome o = run_kolorun({"--no-tag-output", "-np", std::to_string(np), rank_prog(), "lines", std::to_string(k)});
  ASSERT_EQ(o.code, 0) << o.err;
  auto out = split_lines(o.out), err = split_lines(o.err);
  std::vector<std::string> want_out, want_err;
  for (int r = 0; r < np; ++r) {
    auto a = expected_lines("out", r, k), b = expected_lines("err", r, k);
    want_out.insert(want_out.end(), a.begin(), a.end());
    want_err.insert(want_err.end(), b.begin(), b.end());
  }
  std::sort(out.begin(), out.end());
  std::sort(err.begin(), err.end());
  EXPECT_EQ(out, want_out);
  EXPECT_EQ(err, want_err);
}

TEST(Output, PartialLastLineIsFlushedWhenTheRankExits) {
  Outcome o = run_kolorun({"-np", "2", rank_prog(), "partial"});
  ASSERT_EQ(o.code, 0) << o.err;
  auto out = split_lines(o.out), err = split_lines(o.err);
  std::sort(out.begin(), out.end());
  std::sort(err.begin(), err.end());
  // Tagged, the partial line is ended so that the next rank's line starts on its own.
  EXPECT_EQ(out, (std::vector<std::string>{"[0] partial out 0", "[1] partial out 1"}));
  EXPECT_EQ(err, (std::vector<std::string>{"[0] partial err 0", "[1] partial err 1"}));
  EXPECT_EQ(o.out.back(), '\n');
}

TEST(Output, PartialLastLineUntaggedKeepsTheExactBytes) {
  Outcome o = run_kolorun({"-np", "1", "--no-tag-output", rank_prog(), "partial"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "partial out 0");
  EXPECT_EQ(o.err, "partial err 0");
}

TEST(Output, CarriageReturnEndsALineSoProgressBarsRedraw) {
  Outcome o = run_kolorun({"-np", "1", rank_prog(), "progress"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "[0] step 1\r[0] step 2\r[0] done\n");
}

TEST(Output, LongLineIsRelayedWholeWithOnePrefix) {
  const std::size_t n = 300000;  // several pipe buffers, past the relay's partial-line limit
  Outcome o = run_kolorun({"-np", "1", rank_prog(), "longline", std::to_string(n)});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out.size(), n + 5);
  EXPECT_TRUE(o.out == "[0] " + std::string(n, 'x') + "\n") << o.out.substr(0, 100);
}

TEST(Output, OutputDirWritesExactPerRankFilesAndPrintsNothing) {
  TempDir dir;
  const std::string out_dir = dir.file("logs/job1");  // created by kolorun, parents too
  Outcome o = run_kolorun({"-np", "2", "--output-dir", out_dir, rank_prog(), "lines", "3"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "");
  EXPECT_EQ(o.err, "");
  for (int r = 0; r < 2; ++r) {
    std::string want_out, want_err;
    for (int i = 0; i < 3; ++i) {
      want_out += "out " + std::to_string(r) + " " + std::to_string(i) + "\n";
      want_err += "err " + std::to_string(r) + " " + std::to_string(i) + "\n";
    }
    EXPECT_EQ(read_file(out_dir + "/rank." + std::to_string(r) + ".stdout"), want_out);
    EXPECT_EQ(read_file(out_dir + "/rank." + std::to_string(r) + ".stderr"), want_err);
  }
}

TEST(Output, OutputDirKeepsPartialLinesExact) {
  TempDir dir;
  Outcome o = run_kolorun({"-np", "2", "--output-dir", dir.path, rank_prog(), "partial"});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(read_file(dir.file("rank.1.stdout")), "partial out 1");
  EXPECT_EQ(read_file(dir.file("rank.1.stderr")), "partial err 1");
}

}  // namespace
}  // namespace kolotest
