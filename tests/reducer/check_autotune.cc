// kolo::Reducer's self-tuning (src/reducer/autotune.h) as real processes
// under kolorun, with KOLO_AUTOTUNE=1 and short tuning (CMakeLists.txt sets
// the environment): while the layout changes from step to step,
//   - every step's results equal the average computed here from every
//     rank's gradients (handed over in a different order on each rank, one
//     through slot(), some in place, f32 and f64 entries);
//   - the layout did change, and every rank ends on the same one (an
//     allgather of each rank's cap, bucket count and layout fingerprint);
//   - rank 0's KOLO_AUTOTUNE_LOG has the header, a sample line per
//     candidate (distinct caps, each with the bucket count the reducer ran
//     it with: after the first step's readiness rebuild, so not
//     necessarily that cap's count in registration order) and a
//     chosen line naming one of them — the cap every rank ended on.
// Prints "ok" (exit 0) or "FAILED: ..." (exit 3).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#include "checks.h"
#include "kolo/reducer.h"

namespace {

using namespace reducer_test;  // NOLINT: R, N, failures and check() (checks.h)

double grad(int r, int s, std::size_t i, std::size_t j) {
  return std::sin(0.29 * (r + 1) + 0.07 * s + 1e-4 * static_cast<double>(i * 7919 + j)) * (1 + r);
}

// ~17 MB of gradients: the grid's caps (256 KiB .. 64 MiB) cut them differently.
const std::vector<std::size_t> kCounts = {300000, 50000, 1000000, 20000, 600000, 3, 250000, 2000000};
kolo::DType dtype_of(std::size_t i) { return i == 3 ? kolo::DType::F64 : kolo::DType::F32; }

double get(const std::vector<char>& b, kolo::DType t, std::size_t j) {
  return t == kolo::DType::F64 ? reinterpret_cast<const double*>(b.data())[j]
                               : reinterpret_cast<const float*>(b.data())[j];
}
void put(char* b, kolo::DType t, std::size_t j, double v) {
  if (t == kolo::DType::F64) reinterpret_cast<double*>(b)[j] = v;
  else reinterpret_cast<float*>(b)[j] = static_cast<float>(v);
}

std::uint64_t fingerprint(const kolo::Reducer& r) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t b = 0; b < r.buckets(); ++b) {
    for (auto i : r.bucket(b)) h = (h ^ (i + 1)) * 1099511628211ull;
    h = (h ^ 0xffff) * 1099511628211ull;
  }
  return h;
}

struct Row {
  std::string kind;
  std::uint64_t cap = 0, first = 0, buckets = 0;
};

std::vector<Row> read_log(const std::string& path, std::string& header) {
  std::ifstream in(path);
  std::vector<Row> rows;
  std::string line;
  if (!std::getline(in, header)) return rows;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    Row row;
    std::string f;
    std::getline(ss, row.kind, ',');
    std::getline(ss, f, ',');
    row.cap = std::stoull(f);
    std::getline(ss, f, ',');
    row.first = std::stoull(f);
    std::getline(ss, f, ',');
    row.buckets = std::stoull(f);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

int main() {
  return reducer_test::run([](kolo::Communicator& comm) {
    const char* log_path = std::getenv("KOLO_AUTOTUNE_LOG");
    if (!log_path || !*log_path || !std::getenv("KOLO_AUTOTUNE"))
      throw std::runtime_error("run with KOLO_AUTOTUNE=1 and KOLO_AUTOTUNE_LOG set");
    std::vector<kolo::ReducerEntry> specs;
    for (std::size_t i = 0; i < kCounts.size(); ++i) specs.push_back({kCounts[i], dtype_of(i), {}});
    kolo::Reducer red(comm, specs, {});
    const std::size_t n = specs.size();
    std::set<std::uint64_t> layouts_seen;
    std::map<std::uint64_t, std::size_t> ran;  // cap -> buckets in the last step run with it
    const int steps = std::atoi(std::getenv("CHECK_AUTOTUNE_STEPS") ? std::getenv("CHECK_AUTOTUNE_STEPS") : "24");
    for (int s = 0; s < steps && !failures; ++s) {
      std::vector<std::vector<char>> g(n);
      std::vector<std::size_t> order(n);
      for (std::size_t i = 0; i < n; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(100 * R + s));
      for (std::size_t i : order) {
        const auto t = dtype_of(i);
        g[i].resize(kCounts[i] * kolo::dtype_size(t));
        red.arrived(i);
        // Entry 1 lives in the reducer's memory (a gradient view): it must
        // stay put whatever the layout.
        char* dst = i == 1 ? static_cast<char*>(red.slot(i)) : g[i].data();
        for (std::size_t j = 0; j < kCounts[i]; ++j) put(dst, t, j, grad(R, s, i, j));
        red.ready(i, dst, /*in_place=*/i % 2 == 0);
      }
      ran[red.options().bucket_bytes] = red.buckets();
      red.finish();
      layouts_seen.insert(fingerprint(red));
      for (std::size_t i = 0; i < n; ++i) {
        const auto t = dtype_of(i);
        std::vector<char> out(kCounts[i] * kolo::dtype_size(t));
        red.result(i, out.data());
        for (std::size_t j = 0; j < kCounts[i]; j += 3) {
          double want = 0;
          for (int r = 0; r < N; ++r) want += grad(r, s, i, j);
          want /= N;
          const double got = get(out, t, j);
          if (std::abs(got - want) > 1e-5 * (1 + std::abs(want))) {
            check(false, "step " + std::to_string(s) + " entry " + std::to_string(i) + "[" + std::to_string(j) +
                             "] = " + std::to_string(got) + ", want " + std::to_string(want) + " (" +
                             std::to_string(red.buckets()) + " buckets)");
            break;
          }
        }
      }
    }
    check(layouts_seen.size() >= 2, "the layout never changed (" + std::to_string(layouts_seen.size()) +
                                        " layouts in " + std::to_string(steps) + " steps)");
    // Every rank on the same layout.
    std::vector<std::uint64_t> mine = {red.options().bucket_bytes, red.buckets(), fingerprint(red)};
    std::vector<std::uint64_t> all(3 * N);
    comm.allgather(mine.data(), all.data(), 3, kolo::DType::I64);
    for (int r = 0; r < N; ++r)
      for (int k = 0; k < 3; ++k)
        check(all[3 * r + k] == mine[k], "rank " + std::to_string(r) + " ended on layout (cap " +
                                             std::to_string(all[3 * r]) + ", " + std::to_string(all[3 * r + 1]) +
                                             " buckets), this rank on (cap " + std::to_string(mine[0]) + ", " +
                                             std::to_string(mine[1]) + " buckets)");
    if (R == 0) {
      std::string header;
      const auto rows = read_log(log_path, header);
      check(header == "kind,bucket_bytes,first_bucket_bytes,buckets,steps,median_step_ms",
            "log header: '" + header + "'");
      std::set<std::uint64_t> tried;
      int chosen = 0;
      for (const auto& row : rows) {
        if (row.kind == "sample") {
          check(tried.insert(row.cap).second, "log: cap " + std::to_string(row.cap) + " tried twice");
          check(ran.count(row.cap) == 1, "log: cap " + std::to_string(row.cap) + " was never the reducer's");
          check(row.buckets == ran[row.cap], "log: cap " + std::to_string(row.cap) + " ran with " +
                                                 std::to_string(ran[row.cap]) + " buckets, the log says " +
                                                 std::to_string(row.buckets));
        } else if (row.kind == "chosen") {
          ++chosen;
          check(tried.count(row.cap) == 1, "log: the chosen cap " + std::to_string(row.cap) + " was not tried");
          check(row.cap == mine[0], "log: chose cap " + std::to_string(row.cap) + ", the reducer uses " +
                                        std::to_string(mine[0]));
        } else {
          check(false, "log: a line of kind '" + row.kind + "'");
        }
      }
      check(tried.size() >= 3, "log: " + std::to_string(tried.size()) + " candidates tried (want >= 3)");
      check(chosen == 1, "log: " + std::to_string(chosen) + " chosen lines (want 1)");
    }
  });
}
