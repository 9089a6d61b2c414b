// Runs every collective x dtype x op x size, in place and out of place,
// blocking and asynchronous (several in flight), on the real transport it is
// started on, and compares every rank's result byte for byte with a
// reference computed independently (reference.h). Started under kolorun (or
// mpirun); prints "collectives: N checks passed, M failed" and exits 1 on any
// failure.
//
//   check_collectives [--large] [--filter allreduce] [--expect-transport hier]
// --expect-transport fails every rank whose communicator chose another
// transport (the emulated-hosts tests check that the hierarchy is in use).
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kolo/kolo.h"
#include "reference.h"

using namespace kolo;
using test::expected;
using test::input_value;
using test::put;

namespace {

const DType kTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                        DType::I32, DType::I64, DType::U8};
const Op kOps[] = {Op::Sum, Op::Average, Op::Min, Op::Max, Op::Product};

struct Checker {
  Communicator& comm;
  int passed = 0, failed = 0;

  void verdict(bool ok, const std::string& what) {
    if (ok) {
      ++passed;
    } else {
      ++failed;
      std::fprintf(stderr, "rank %d: FAILED %s\n", comm.rank(), what.c_str());
    }
  }
};

// A buffer of `count` elements of t.
struct Buf {
  std::vector<char> bytes;
  Buf(DType t, std::size_t count, char fill = 0x5a) : bytes(count * dtype_size(t) + 1, fill) {}
  char* data() { return bytes.data(); }
  bool same(const Buf& o, std::size_t n) const { return std::memcmp(bytes.data(), o.bytes.data(), n) == 0; }
};

// One prepared collective: run it (blocking or returning a Work), then check.
struct Job {
  std::string name;
  std::function<Work(bool async)> run;
  std::function<bool()> check;
};

std::string describe(const char* coll, DType t, Op op, std::size_t count, bool inplace, bool async,
                     int n) {
  return fmt::format("{}({}, {}, count={}, {}, {}) on {} ranks", coll, dtype_name(t), op_name(op),
                     count, inplace ? "in place" : "out of place", async ? "async" : "blocking", n);
}

Job allreduce_job(Communicator& c, DType t, Op op, std::size_t count, bool inplace) {
  const int n = c.size(), r = c.rank();
  const std::size_t es = dtype_size(t);
  auto in = std::make_shared<Buf>(t, count), out = std::make_shared<Buf>(t, count),
       want = std::make_shared<Buf>(t, count);
  std::vector<double> vals(n);
  for (std::size_t i = 0; i < count; ++i) {
    for (int q = 0; q < n; ++q) vals[q] = input_value(t, op, q, i);
    put(t, in->data(), i, vals[r]);
    put(t, want->data(), i, expected(t, op, vals));
  }
  Buf* result = inplace ? in.get() : out.get();
  return {"allreduce",
          [=, &c, keep = out](bool async) {
            if (async) return c.allreduce_async(in->data(), result->data(), count, t, op);
            c.allreduce(in->data(), result->data(), count, t, op);
            return Work();
          },
          [=, keep = out] { return result->same(*want, count * es); }};
}

Job broadcast_job(Communicator& c, DType t, std::size_t count, int root) {
  const std::size_t es = dtype_size(t);
  auto data = std::make_shared<Buf>(t, count), want = std::make_shared<Buf>(t, count);
  for (std::size_t i = 0; i < count; ++i) {
    put(t, want->data(), i, input_value(t, Op::Sum, root, i));
    if (c.rank() == root) put(t, data->data(), i, input_value(t, Op::Sum, root, i));
  }
  return {"broadcast",
          [=, &c](bool async) {
            if (async) return c.broadcast_async(data->data(), count, t, root);
            c.broadcast(data->data(), count, t, root);
            return Work();
          },
          [=] { return data->same(*want, count * es); }};
}

// Equal counts (allgather) or per-rank counts (allgatherv: count + rank, and
// rank 1 contributes nothing).
Job allgather_job(Communicator& c, DType t, std::size_t count, bool inplace, bool varying) {
  const int n = c.size(), r = c.rank();
  const std::size_t es = dtype_size(t);
  std::vector<std::size_t> counts(n, count);
  if (varying)
    for (int q = 0; q < n; ++q) counts[q] = q == 1 ? 0 : count + q;
  std::size_t total = 0, my_offset = 0;
  for (int q = 0; q < n; ++q) {
    if (q == r) my_offset = total;
    total += counts[q];
  }
  auto in = std::make_shared<Buf>(t, counts[r]), out = std::make_shared<Buf>(t, total),
       want = std::make_shared<Buf>(t, total);
  for (int q = 0, at = 0; q < n; at += counts[q], ++q)
    for (std::size_t i = 0; i < counts[q]; ++i) put(t, want->data(), at + i, input_value(t, Op::Sum, q, i));
  for (std::size_t i = 0; i < counts[r]; ++i) {
    put(t, in->data(), i, input_value(t, Op::Sum, r, i));
    if (inplace) put(t, out->data(), my_offset + i, input_value(t, Op::Sum, r, i));
  }
  const char* src = inplace ? out->data() + my_offset * es : in->data();
  return {varying ? "allgatherv" : "allgather",
          [=, &c, keep = in](bool async) {
            if (varying) {
              if (async) return c.allgatherv_async(src, out->data(), counts, t);
              c.allgatherv(src, out->data(), counts, t);
            } else {
              if (async) return c.allgather_async(src, out->data(), count, t);
              c.allgather(src, out->data(), count, t);
            }
            return Work();
          },
          [=] { return out->same(*want, total * es); }};
}

Job reduce_scatter_job(Communicator& c, DType t, Op op, std::size_t count, bool inplace) {
  const int n = c.size(), r = c.rank();
  const std::size_t es = dtype_size(t);
  auto in = std::make_shared<Buf>(t, count * n), out = std::make_shared<Buf>(t, count),
       want = std::make_shared<Buf>(t, count);
  std::vector<double> vals(n);
  for (std::size_t i = 0; i < count * n; ++i) put(t, in->data(), i, input_value(t, op, r, i));
  for (std::size_t i = 0; i < count; ++i) {
    for (int q = 0; q < n; ++q) vals[q] = input_value(t, op, q, r * count + i);
    put(t, want->data(), i, expected(t, op, vals));
  }
  char* dst = inplace ? in->data() + r * count * es : out->data();
  return {"reduce_scatter",
          [=, &c, keep = out](bool async) {
            if (async) return c.reduce_scatter_async(in->data(), dst, count, t, op);
            c.reduce_scatter(in->data(), dst, count, t, op);
            return Work();
          },
          [=, keep = out] { return std::memcmp(dst, want->data(), count * es) == 0; }};
}

Job alltoall_job(Communicator& c, DType t, std::size_t count) {
  const int n = c.size(), r = c.rank();
  const std::size_t es = dtype_size(t);
  auto in = std::make_shared<Buf>(t, count * n), out = std::make_shared<Buf>(t, count * n),
       want = std::make_shared<Buf>(t, count * n);
  for (std::size_t i = 0; i < count * n; ++i) put(t, in->data(), i, input_value(t, Op::Sum, r, i));
  for (int q = 0; q < n; ++q)
    for (std::size_t i = 0; i < count; ++i)
      put(t, want->data(), q * count + i, input_value(t, Op::Sum, q, r * count + i));
  return {"alltoall",
          [=, &c](bool async) {
            if (async) return c.alltoall_async(in->data(), out->data(), count, t);
            c.alltoall(in->data(), out->data(), count, t);
            return Work();
          },
          [=] { return out->same(*want, count * n * es); }};
}

// Runs jobs blocking one by one, then all of them asynchronously at once.
void run_both_ways(Checker& ck, std::vector<std::pair<std::string, std::function<Job()>>> makers) {
  for (bool async : {false, true}) {
    std::vector<Job> jobs;
    std::vector<Work> works;
    for (auto& [what, make] : makers) jobs.push_back(make());
    for (auto& j : jobs) works.push_back(j.run(async));
    for (auto& w : works)
      if (w.valid()) w.wait();
    for (std::size_t k = 0; k < jobs.size(); ++k)
      ck.verdict(jobs[k].check(), makers[k].first + (async ? " [async]" : " [blocking]"));
  }
}

// Random (non-integer) floats: whatever the summation order inside an
// algorithm, every rank must end up with the same bits.
void check_bit_identical(Checker& ck, std::size_t count) {
  Communicator& c = ck.comm;
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    Buf data(t, count);
    std::mt19937 rng(1234 + c.rank());
    std::uniform_real_distribution<float> u(-1, 1);
    for (std::size_t i = 0; i < count; ++i) put(t, data.data(), i, u(rng));
    c.allreduce(data.data(), data.data(), count, t, Op::Sum);
    std::uint64_t h = 1469598103934665603ull;
    for (std::size_t i = 0; i < count * dtype_size(t); ++i) h = (h ^ static_cast<unsigned char>(data.bytes[i])) * 1099511628211ull;
    std::vector<std::int64_t> all(c.size());
    const auto mine = static_cast<std::int64_t>(h);
    c.allgather(&mine, all.data(), 1, DType::I64);
    bool same = true;
    for (auto x : all) same &= x == all[0];
    ck.verdict(same, fmt::format("bit-identical allreduce({}, sum, count={}) on every rank", dtype_name(t), count));
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool large = false;
  std::string filter, transport;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--large") large = true;
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--expect-transport" && i + 1 < argc) transport = argv[++i];
    else { std::fprintf(stderr, "usage: check_collectives [--large] [--filter NAME] [--expect-transport NAME]\n"); return 2; }
  }
  try {
    Communicator comm = init();
    Checker ck{comm};
    if (!transport.empty())
      ck.verdict(comm.transport() == transport,
                 fmt::format("transport is {}, expected {}", comm.transport(), transport));
    const int n = comm.size();
    auto want = [&](const char* name) { return filter.empty() || filter == name; };

    // 0, 1, 7, an odd size not divisible by most world sizes, and one past
    // the small/large algorithm switch (64 KiB) for every type, which for the
    // wider types also spans several shared-memory chunks (256 KiB).
    std::vector<std::size_t> counts = {0, 1, 7, 1001, 70001};
    for (std::size_t count : counts) {
      for (DType t : kTypes) {
        std::vector<std::pair<std::string, std::function<Job()>>> batch;
        for (Op op : kOps) {
          if (!op_supported(t, op)) continue;
          for (bool inplace : {false, true}) {
            if (want("allreduce"))
              batch.push_back({describe("allreduce", t, op, count, inplace, false, n),
                               [&, t, op, count, inplace] { return allreduce_job(comm, t, op, count, inplace); }});
            if (want("reduce_scatter"))
              batch.push_back({describe("reduce_scatter", t, op, count, inplace, false, n),
                               [&, t, op, count, inplace] { return reduce_scatter_job(comm, t, op, count, inplace); }});
          }
        }
        for (bool inplace : {false, true}) {
          if (want("allgather"))
            batch.push_back({describe("allgather", t, Op::Sum, count, inplace, false, n),
                             [&, t, count, inplace] { return allgather_job(comm, t, count, inplace, false); }});
          if (want("allgatherv"))
            batch.push_back({describe("allgatherv", t, Op::Sum, count, inplace, false, n),
                             [&, t, count, inplace] { return allgather_job(comm, t, count, inplace, true); }});
        }
        if (want("broadcast"))
          for (int root : {0, n - 1})
            batch.push_back({fmt::format("broadcast({}, count={}, root={})", dtype_name(t), count, root),
                             [&, t, count, root] { return broadcast_job(comm, t, count, root); }});
        if (want("alltoall"))
          batch.push_back({fmt::format("alltoall({}, count={})", dtype_name(t), count),
                           [&, t, count] { return alltoall_job(comm, t, count); }});
        run_both_ways(ck, std::move(batch));
      }
    }
    if (want("bitwise")) check_bit_identical(ck, 3 * 65536 + 7);  // several chunks of every type

    if (large) {
      // >= 64 MiB messages: one type per collective (f32), plus bf16 averaging.
      const std::size_t big = (64u << 20) / 4 + 5;
      std::vector<std::pair<std::string, std::function<Job()>>> batch;
      if (want("allreduce")) {
        batch.push_back({"allreduce(f32, sum, 64 MiB, out of place)", [&] { return allreduce_job(comm, DType::F32, Op::Sum, big, false); }});
        batch.push_back({"allreduce(bf16, average, 64 MiB, in place)", [&] { return allreduce_job(comm, DType::BF16, Op::Average, 2 * big, true); }});
      }
      if (want("broadcast"))
        batch.push_back({"broadcast(f32, 64 MiB)", [&] { return broadcast_job(comm, DType::F32, big, n - 1); }});
      if (want("allgather"))
        batch.push_back({"allgather(f32, 64 MiB total)", [&] { return allgather_job(comm, DType::F32, big / n, false, false); }});
      if (want("reduce_scatter"))
        batch.push_back({"reduce_scatter(f32, 64 MiB input)", [&] { return reduce_scatter_job(comm, DType::F32, Op::Max, big / n, false); }});
      if (want("alltoall"))
        batch.push_back({"alltoall(f32, 64 MiB)", [&] { return alltoall_job(comm, DType::F32, big / n); }});
      run_both_ways(ck, std::move(batch));
    }
    comm.barrier();
    if (comm.rank() == 0 || ck.failed > 0)
      std::printf("collectives: %d passed, %d failed (%d ranks, transport %s)\n", ck.passed, ck.failed, n,
                  comm.transport().c_str());
    return ck.failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
