// Runs every collective x dtype x op x size, in place and out of place,
// blocking and asynchronous (several in flight), on the real transport it is
// started on, and compares every rank's result byte for byte with a
// reference computed independently (reference.h). Started under kolorun (or
// mpirun); prints "collectives: N checks passed, M failed" and exits 1 on any
// failure.
//
//   check_collectives [--large] [--huge] [--filter allreduce|alltoallv|...] [--expect-transport hier] [--cuda]
// --cuda runs every check on CUDA memory of GPU local_rank % devices
// (memory.h): exit code 77 (skipped) on every rank where no GPU can be used.
// --huge adds 256 MiB messages (allreduce, allgather). --expect-gpu-transport
// fails every rank whose communicator chose another plane for CUDA memory.
// --expect-transport fails every rank whose communicator chose another
// transport (the emulated-hosts tests check that the hierarchy is in use).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kolo/kolo.h"
#include "memory.h"
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
// The jobs fill and read it on the host; kolo is given at(p) (memory.h): the
// pointer itself, or its place in the CUDA mirror, which up() fills before
// the collective and down() reads back before the check.
struct Buf {
  std::vector<char> bytes;
  Buf(DType t, std::size_t count, char fill = 0x5a) : bytes(count * dtype_size(t) + 1, fill) {
    test::mirror(bytes.data(), bytes.size());
  }
  ~Buf() { test::forget(bytes.data()); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  char* data() { return bytes.data(); }
  void up() { test::upload(bytes.data()); }
  void down() { test::download(bytes.data()); }
  bool same(const Buf& o, std::size_t n) const { return std::memcmp(bytes.data(), o.bytes.data(), n) == 0; }
};
using test::at;
using test::place;

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
            in->up();
            if (result != in.get()) result->up();
            if (async) return c.allreduce_async(at(in->data()), at(result->data()), count, t, op, {}, place());
            c.allreduce(at(in->data()), at(result->data()), count, t, op, {}, place());
            return Work();
          },
          [=, keep = out] {
            result->down();
            return result->same(*want, count * es);
          }};
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
            data->up();
            if (async) return c.broadcast_async(at(data->data()), count, t, root, {}, place());
            c.broadcast(at(data->data()), count, t, root, {}, place());
            return Work();
          },
          [=] {
            data->down();
            return data->same(*want, count * es);
          }};
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
            in->up();
            out->up();
            if (varying) {
              if (async) return c.allgatherv_async(at(src), at(out->data()), counts, t, place());
              c.allgatherv(at(src), at(out->data()), counts, t, place());
            } else {
              if (async) return c.allgather_async(at(src), at(out->data()), count, t, place());
              c.allgather(at(src), at(out->data()), count, t, place());
            }
            return Work();
          },
          [=] {
            out->down();
            return out->same(*want, total * es);
          }};
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
            in->up();
            out->up();
            if (async) return c.reduce_scatter_async(at(in->data()), at(dst), count, t, op, {}, place());
            c.reduce_scatter(at(in->data()), at(dst), count, t, op, {}, place());
            return Work();
          },
          [=, keep = out] {
            in->down();
            out->down();
            return std::memcmp(dst, want->data(), count * es) == 0;
          }};
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
            in->up();
            out->up();
            if (async) return c.alltoall_async(at(in->data()), at(out->data()), count, t, place());
            c.alltoall(at(in->data()), at(out->data()), count, t, place());
            return Work();
          },
          [=] {
            out->down();
            return out->same(*want, count * n * es);
          }};
}

// alltoallv's counts: how many elements rank `src` sends rank `dst`, around
// `base`. Zero where it matters most: rank 1 receives nothing at all, and
// rank 0 sends nothing to the last rank (3 ranks or more).
std::size_t a2av_count(int src, int dst, int n, std::size_t base) {
  if (n > 1 && dst == 1) return 0;
  if (n > 2 && src == 0 && dst == n - 1) return 0;
  return base + static_cast<std::size_t>((src * 3 + dst * 5) % 7);
}

// The value of element i of the block rank src sends rank dst: small
// integers (exact in every type) that tell sender, receiver and position apart.
double a2av_value(int src, int dst, std::size_t i) {
  return static_cast<double>((src * 31 + dst * 17 + i * 5 + 1) % 97);
}

// alltoallv with the counts above and blocks laid out apart from rank
// order: send blocks in reverse rank order with 3 elements between them,
// receive blocks in rank order with 2 between them. The expected output
// (computed here from the counts and values) leaves every element outside
// the blocks as it was; `packed` passes no offsets (blocks back to back).
Job alltoallv_job(Communicator& c, DType t, std::size_t base, bool packed) {
  const int n = c.size(), r = c.rank();
  const std::size_t gap_in = packed ? 0 : 3, gap_out = packed ? 0 : 2;
  std::vector<std::size_t> send(n), send_off(n), recv(n), recv_off(n);
  std::size_t in_len = 0, out_len = 0;
  for (int k = 0; k < n; ++k) {
    const int q = packed ? k : n - 1 - k;
    send[q] = a2av_count(r, q, n, base);
    send_off[q] = in_len;
    in_len += send[q] + gap_in;
  }
  for (int q = 0; q < n; ++q) {
    recv[q] = a2av_count(q, r, n, base);
    recv_off[q] = out_len;
    out_len += recv[q] + gap_out;
  }
  auto in = std::make_shared<Buf>(t, in_len), out = std::make_shared<Buf>(t, out_len),
       want = std::make_shared<Buf>(t, out_len);
  for (int q = 0; q < n; ++q) {
    for (std::size_t i = 0; i < send[q]; ++i) put(t, in->data(), send_off[q] + i, a2av_value(r, q, i));
    for (std::size_t i = 0; i < recv[q]; ++i) put(t, want->data(), recv_off[q] + i, a2av_value(q, r, i));
  }
  if (packed) send_off.clear(), recv_off.clear();
  return {"alltoallv",
          [=, &c](bool async) {
            if (async) return c.alltoallv_async(in->data(), send, send_off, out->data(), recv, recv_off, t);
            c.alltoallv(in->data(), send, send_off, out->data(), recv, recv_off, t);
            return Work();
          },
          [=] { return out->same(*want, out->bytes.size()); }};
}

// Horovod's form, on vectors: only the senders give counts; every rank
// learns what it receives (alltoallv_counts) and gets it back.
void check_alltoallv_vectors(Checker& ck) {
  Communicator& c = ck.comm;
  const int n = c.size(), r = c.rank();
  std::vector<std::size_t> send(n);
  std::vector<std::int32_t> in, want;
  for (int q = 0; q < n; ++q) {
    send[q] = a2av_count(r, q, n, 4);
    for (std::size_t i = 0; i < send[q]; ++i) in.push_back(static_cast<std::int32_t>(a2av_value(r, q, i)));
  }
  std::vector<std::size_t> want_counts(n);
  for (int q = 0; q < n; ++q) {
    want_counts[q] = a2av_count(q, r, n, 4);
    for (std::size_t i = 0; i < want_counts[q]; ++i) want.push_back(static_cast<std::int32_t>(a2av_value(q, r, i)));
  }
  std::vector<std::size_t> got_counts;
  const std::vector<std::int32_t> got = c.alltoallv(in, send, &got_counts);
  ck.verdict(got == want && got_counts == want_counts, "alltoallv(vector<i32>, send counts only)");
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
    data.up();
    c.allreduce(at(data.data()), at(data.data()), count, t, Op::Sum, {}, place());
    data.down();
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

// CUDA mode: the collective is ordered on the caller's stream. Rank 0's copy
// of the result back to the host is queued right after an async allreduce,
// without Work::wait(), while rank 1 issues its part 300 ms late: the copy
// must still see the result (the stream waited on the GPU for the collective).
void check_stream_order(Checker& ck) {
  Communicator& c = ck.comm;
  const std::size_t count = 1 << 16;
  Buf data(DType::F32, count), want(DType::F32, count);
  std::vector<double> vals(c.size());
  for (std::size_t i = 0; i < count; ++i) {
    for (int q = 0; q < c.size(); ++q) vals[q] = input_value(DType::F32, Op::Sum, q, i);
    put(DType::F32, data.data(), i, vals[c.rank()]);
    put(DType::F32, want.data(), i, expected(DType::F32, Op::Sum, vals));
  }
  data.up();
  if (c.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Work w = c.allreduce_async(at(data.data()), at(data.data()), count, DType::F32, Op::Sum, {}, place());
  data.down();  // queued on the stream now, before wait()
  ck.verdict(data.same(want, count * 4), "result read on the caller's stream right after allreduce_async");
  w.wait();
}

// CUDA mode: a collective on a stream being captured into a CUDA graph is
// refused on every rank before anything is queued (a graph would replay the
// event and the stream's wait, not the collective); the communicator goes on.
void check_capture_refused(Checker& ck) {
  Communicator& c = ck.comm;
  Buf data(DType::F32, 16);
  data.up();
  test::settle();
  const std::string e = test::while_captured(
      [&] { c.allreduce(at(data.data()), at(data.data()), 16, DType::F32, Op::Sum, {}, place()); });
  ck.verdict(e.find("captured into a CUDA graph") != std::string::npos, "allreduce on a stream being captured: " + e);
  c.barrier();
}

// CUDA mode, last: rank 1 passes host memory where the others pass CUDA
// memory. Every rank must fail with the mismatch error naming both.
void check_place_mismatch(Checker& ck) {
  Communicator& c = ck.comm;
  Buf data(DType::F32, 16);
  data.up();
  try {
    if (c.rank() == 1)
      c.allreduce(data.data(), data.data(), 16, DType::F32, Op::Sum);
    else
      c.allreduce(at(data.data()), at(data.data()), 16, DType::F32, Op::Sum, {}, place());
    ck.verdict(false, "host memory on rank 1, CUDA memory on the others: no error");
  } catch (const Error& e) {
    const std::string what = e.what();
    const bool named = what.find("mismatched") != std::string::npos && what.find("on cuda") != std::string::npos;
    ck.verdict(named, "host memory on rank 1, CUDA memory on the others: " + what);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool large = false, huge = false, cuda = false;
  std::string filter, transport, gpu_transport;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--large") large = true;
    else if (a == "--huge") huge = true;
    else if (a == "--cuda") cuda = true;
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--expect-transport" && i + 1 < argc) transport = argv[++i];
    else if (a == "--expect-gpu-transport" && i + 1 < argc) gpu_transport = argv[++i];
    else { std::fprintf(stderr, "usage: check_collectives [--large] [--huge] [--filter NAME] [--expect-transport NAME] "
                               "[--expect-gpu-transport NAME] [--cuda]\n"); return 2; }
  }
  try {
    Communicator comm = init();
    if (cuda && !test::use_cuda(comm.local_rank())) return test::kSkipped;
    Checker ck{comm};
    if (!transport.empty())
      ck.verdict(comm.transport() == transport,
                 fmt::format("transport is {}, expected {}", comm.transport(), transport));
    if (!gpu_transport.empty())
      ck.verdict(comm.gpu_transport() == gpu_transport,
                 fmt::format("gpu transport is {}, expected {}", comm.gpu_transport(), gpu_transport));
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
        // alltoallv takes host memory only (kolo.h): not run on CUDA memory.
        if (want("alltoallv") && !test::on_cuda())
          for (bool packed : {false, true})
            batch.push_back({fmt::format("alltoallv({}, blocks of about {}{})", dtype_name(t), count,
                                         packed ? ", packed" : ""),
                             [&, t, count, packed] { return alltoallv_job(comm, t, count, packed); }});
        run_both_ways(ck, std::move(batch));
      }
    }
    if (want("bitwise")) check_bit_identical(ck, 3 * 65536 + 7);
    if (want("alltoallv") && !test::on_cuda()) check_alltoallv_vectors(ck);  // several chunks of every type

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
      if (want("alltoallv") && !test::on_cuda())
        batch.push_back({"alltoallv(f32, about 64 MiB)", [&] { return alltoallv_job(comm, DType::F32, big / n / n, false); }});
      run_both_ways(ck, std::move(batch));
    }
    if (huge) {
      const std::size_t big = (256u << 20) / 4;
      std::vector<std::pair<std::string, std::function<Job()>>> batch;
      if (want("allreduce"))
        batch.push_back({"allreduce(f32, sum, 256 MiB, in place)", [&] { return allreduce_job(comm, DType::F32, Op::Sum, big, true); }});
      if (want("allgather"))
        batch.push_back({"allgather(f32, 256 MiB total)", [&] { return allgather_job(comm, DType::F32, big / n, false, false); }});
      run_both_ways(ck, std::move(batch));
    }
    if (test::on_cuda() && n > 1) {
      check_stream_order(ck);
      check_capture_refused(ck);
      check_place_mismatch(ck);
    }
    comm.barrier();
    if (comm.rank() == 0 || ck.failed > 0)
      std::printf("collectives: %d passed, %d failed (%d ranks, transport %s%s)\n", ck.passed, ck.failed, n,
                  comm.transport().c_str(), test::on_cuda() ? (", CUDA memory, gpu transport " + comm.gpu_transport()).c_str() : "");
    return ck.failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
