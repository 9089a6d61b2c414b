// Named operations (comm/named_channel.h), as real processes under kolorun.
//   kolo_named order      every rank issues the same named collectives in its
//                         own order (rank 0 as listed, rank 1 reversed, the
//                         others shuffled by rank), unnamed ones between them,
//                         three steps (the second and third from the response
//                         cache, the third with one name's count changed);
//                         results against sums computed here; then the
//                         other kinds, and a communicator of one rank
//   kolo_named mismatch   rank 1 issues a name with another count: every rank
//                         gets the error naming both calls; then it all works
//   kolo_named duplicate  rank 1 issues a name twice: DuplicateNameError on
//                         rank 1 only; then named and unnamed calls work
//   kolo_named stall      rank 0 issues 'late' and 'early'; the last rank
//                         issues 'early' at once and 'late' 1.5 s later
//                         (KOLO_STALL_WARN_MS=300 from the test): rank 0 must
//                         warn naming 'late' and the last rank
//   kolo_named first-stall  as stall, but the last rank issues no named
//                         operation for 1.5 s (before the channel exists)
//   kolo_named die        the last rank issues 'a' and exits at once; the
//                         others wait for 'a' and 'b': each must get an error
//                         within the test's timeout, never hang
// Prints "ok" (exit 0) or "FAILED: ..." (exit 3); "caught: <error>" lines
// for the errors the test expects.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kolo/kolo.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what.c_str());
    ++failures;
  }
}

// Rank r's value at element i of operation k: exact in float, distinct per rank.
float value(int r, int k, std::size_t i) { return static_cast<float>((r + 1) * 100 + k * 7 + static_cast<int>(i % 13)); }

struct Named {
  std::string name;
  std::size_t count;
  std::vector<float> data;
  kolo::Work work;
};

// Issues ops in `order`, with an unnamed allreduce after every other one (the
// ordered path, same order everywhere), then waits for everything in the
// reverse order and checks every result.
void one_step(kolo::Communicator& comm, std::vector<Named>& ops, const std::vector<int>& order, int step) {
  const int rank = comm.rank(), size = comm.size();
  std::vector<std::vector<double>> unnamed;
  std::vector<kolo::Work> unnamed_work;
  for (std::size_t j = 0; j < order.size(); ++j) {
    const int k = order[j];
    Named& op = ops[k];
    op.data.resize(op.count);
    for (std::size_t i = 0; i < op.count; ++i) op.data[i] = value(rank, k + step, i);
    op.work = comm.allreduce_async(op.data.data(), op.data.data(), op.count, kolo::DType::F32, kolo::Op::Sum, {},
                                   {}, op.name);
    if (j % 2 == 1) {  // unnamed, in the same position of the ordered stream on every rank
      unnamed.emplace_back(3, rank + 1.0 + static_cast<double>(j));
      unnamed_work.push_back(comm.allreduce_async(unnamed.back().data(), unnamed.back().data(), 3,
                                                  kolo::DType::F64, kolo::Op::Sum));
    }
  }
  for (std::size_t j = order.size(); j-- > 0;) ops[order[j]].work.wait();
  for (auto& w : unnamed_work) w.wait();
  for (std::size_t k = 0; k < ops.size(); ++k) {
    bool same = true;
    for (std::size_t i = 0; i < ops[k].count && same; ++i) {
      double want = 0;
      for (int r = 0; r < size; ++r) want += value(r, static_cast<int>(k) + step, i);
      same = ops[k].data[i] == static_cast<float>(want);
    }
    expect(same, "step " + std::to_string(step) + ": wrong sum for " + ops[k].name);
  }
  std::size_t u = 0;
  for (std::size_t j = 1; j < order.size(); j += 2, ++u) {
    double want = 0;
    for (int r = 0; r < size; ++r) want += r + 1.0 + static_cast<double>(j);
    expect(unnamed[u][0] == want && unnamed[u][2] == want, "step " + std::to_string(step) + ": wrong unnamed sum");
  }
}

// The other kinds, named, in opposite orders on even and odd ranks.
void other_kinds(kolo::Communicator& comm) {
  const int rank = comm.rank(), size = comm.size();
  const std::size_t n = 5;
  std::vector<std::int64_t> bcast(n, rank == 1 % size ? 77 : -1);
  std::vector<std::int32_t> mine(n, rank * 10), gathered(n * size, -1);
  std::vector<double> rs_in(n * size), rs_out(n, -1);
  for (std::size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<double>(rank + i);
  std::vector<std::uint8_t> a2a_in(2 * size), a2a_out(2 * size, 0);
  for (int q = 0; q < size; ++q) a2a_in[2 * q] = a2a_in[2 * q + 1] = static_cast<std::uint8_t>(rank * 16 + q);
  // alltoallv, uneven: rank r sends q + 1 copies of r * 16 + q to rank q (rank 0: none to itself).
  std::vector<std::size_t> v_send(size), v_recv(size);
  std::vector<std::int32_t> v_in, v_out;
  for (int q = 0; q < size; ++q) {
    v_send[q] = static_cast<std::size_t>(q + 1) - (rank == 0 && q == 0);
    v_recv[q] = static_cast<std::size_t>(rank + 1) - (q == 0 && rank == 0);
    v_in.insert(v_in.end(), v_send[q], rank * 16 + q);
  }
  std::size_t v_total = 0;
  for (auto n : v_recv) v_total += n;
  v_out.assign(v_total, -1);
  std::vector<kolo::Work> w(5);
  auto issue = [&](int which) {
    switch (which) {
      case 0: w[0] = comm.broadcast_async(bcast.data(), n, kolo::DType::I64, 1 % size, {}, {}, "bcast"); break;
      case 1: w[1] = comm.allgather_async(mine.data(), gathered.data(), n, kolo::DType::I32, {}, "gather"); break;
      case 2:
        w[2] = comm.reduce_scatter_async(rs_in.data(), rs_out.data(), n, kolo::DType::F64, kolo::Op::Max, {}, {}, "rs");
        break;
      case 3: w[3] = comm.alltoall_async(a2a_in.data(), a2a_out.data(), 2, kolo::DType::U8, {}, "a2a"); break;
      case 4:
        w[4] = comm.alltoallv_async(v_in.data(), v_send, {}, v_out.data(), v_recv, {}, kolo::DType::I32, {}, "a2av");
        break;
    }
  };
  for (int j = 0; j < 5; ++j) issue(rank % 2 ? 4 - j : j);
  for (auto& x : w) x.wait();
  expect(std::all_of(bcast.begin(), bcast.end(), [](std::int64_t v) { return v == 77; }), "named broadcast");
  bool ok = true;
  for (int q = 0; q < size; ++q)
    for (std::size_t i = 0; i < n; ++i) ok &= gathered[q * n + i] == q * 10;
  expect(ok, "named allgather");
  ok = true;
  for (std::size_t i = 0; i < n; ++i) ok &= rs_out[i] == static_cast<double>(size - 1 + rank * n + i);
  expect(ok, "named reduce_scatter");
  ok = true;
  for (int q = 0; q < size; ++q) ok &= a2a_out[2 * q] == q * 16 + rank && a2a_out[2 * q + 1] == q * 16 + rank;
  expect(ok, "named alltoall");
  std::vector<std::int32_t> v_want;
  for (int q = 0; q < size; ++q) v_want.insert(v_want.end(), v_recv[q], q * 16 + rank);
  expect(v_out == v_want, "named alltoallv (uneven, a zero count)");
}

int order() {
  auto comm = kolo::init();
  const int rank = comm.rank();
  std::vector<Named> ops;
  for (int k = 0; k < 12; ++k) ops.push_back({"grad." + std::to_string(k), static_cast<std::size_t>(1 + k * 997), {}, {}});
  std::vector<int> order(ops.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int>(k);
  if (rank == 1) std::reverse(order.begin(), order.end());
  if (rank > 1) std::shuffle(order.begin(), order.end(), std::mt19937(rank));
  one_step(comm, ops, order, 0);
  one_step(comm, ops, order, 1);  // the same names: from the cache
  ops[5].count = 4;               // one name called otherwise: announced in full again
  one_step(comm, ops, order, 2);
  other_kinds(comm);
  // A communicator of one rank (as a process set of one): named operations run at once.
  kolo::Communicator solo = comm.split(rank);
  std::vector<float> s(3, 2.0f);
  solo.allreduce_async(s.data(), s.data(), 3, kolo::DType::F32, kolo::Op::Sum, {}, {}, "solo").wait();
  expect(s[0] == 2.0f && s[2] == 2.0f, "a named operation on a communicator of one rank");
  comm.barrier();
  return 0;
}

int mismatch() {
  auto comm = kolo::init();
  const int rank = comm.rank(), size = comm.size();
  std::vector<float> x(rank == 1 ? 9 : 10, 1.0f);
  try {
    comm.allreduce_async(x.data(), x.data(), x.size(), kolo::DType::F32, kolo::Op::Sum, {}, {}, "odd").wait();
    expect(false, "a name issued with different counts did not fail");
  } catch (const kolo::Error& e) {
    std::printf("caught: %s\n", e.what());
    expect(std::strstr(e.what(), "'odd'") && std::strstr(e.what(), "allreduce(f32, 9, sum)") &&
               std::strstr(e.what(), "allreduce(f32, 10, sum)"),
           "the mismatch error does not name the operation and both calls");
  }
  std::vector<float> y(10, 1.0f);
  comm.allreduce_async(y.data(), y.data(), y.size(), kolo::DType::F32, kolo::Op::Sum, {}, {}, "odd").wait();
  expect(y[9] == static_cast<float>(size), "the same name after a mismatch");
  comm.allreduce(y.data(), y.size(), kolo::Op::Sum);
  expect(y[0] == static_cast<float>(size * size), "an unnamed call after a mismatch");
  return 0;
}

int duplicate() {
  auto comm = kolo::init();
  const int rank = comm.rank(), size = comm.size();
  std::vector<float> x(17, 1.0f), y(17, 1.0f);
  kolo::Work first = comm.allreduce_async(x.data(), x.data(), x.size(), kolo::DType::F32, kolo::Op::Sum, {}, {}, "dup");
  if (rank == 1) {
    try {
      comm.allreduce_async(y.data(), y.data(), y.size(), kolo::DType::F32, kolo::Op::Sum, {}, {}, "dup");
      expect(false, "a name in flight was accepted again");
    } catch (const kolo::DuplicateNameError& e) {
      std::printf("caught: %s\n", e.what());
      expect(std::strstr(e.what(), "'dup'") != nullptr, "the duplicate-name error does not name 'dup'");
    }
  }
  first.wait();
  expect(x[0] == static_cast<float>(size), "the first 'dup'");
  // The name is free again once done, and the communicator works.
  comm.allreduce_async(x.data(), x.data(), x.size(), kolo::DType::F32, kolo::Op::Sum, {}, {}, "dup").wait();
  expect(x[16] == static_cast<float>(size * size), "'dup' again");
  comm.allreduce(y.data(), y.size(), kolo::Op::Sum);
  expect(y[3] == static_cast<float>(size), "unnamed after the duplicate");
  return 0;
}

int stall(bool first) {
  auto comm = kolo::init();
  const int rank = comm.rank(), last = comm.size() - 1;
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  auto issue = [&](std::vector<float>& v, const char* name) {
    return comm.allreduce_async(v.data(), v.data(), v.size(), kolo::DType::F32, kolo::Op::Sum, {}, {}, name);
  };
  if (!first) {  // the channel exists and its rounds run
    issue(a, "warmup").wait();
  }
  kolo::Work late, early;
  if (rank == last) {
    if (!first) early = issue(b, "early");
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    if (first) early = issue(b, "early");
    late = issue(a, "late");
  } else {
    late = issue(a, "late");
    early = issue(b, "early");
  }
  late.wait();
  early.wait();
  expect(a[0] == static_cast<float>(comm.size() * (first ? 1 : comm.size())), "'late' after the stall");
  return 0;
}

int die() {
  auto comm = kolo::init();
  const int rank = comm.rank(), last = comm.size() - 1;
  std::vector<float> a(4, 1.0f), b(4, 1.0f);
  comm.allreduce_async(a.data(), a.data(), 4, kolo::DType::F32, kolo::Op::Sum, {}, {}, "warmup").wait();
  if (rank == last) {
    comm.allreduce_async(a.data(), a.data(), 4, kolo::DType::F32, kolo::Op::Sum, {}, {}, "a");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::fflush(stdout);
    _exit(0);  // mid-negotiation: 'a' announced, 'b' never
  }
  try {
    auto wa = comm.allreduce_async(a.data(), a.data(), 4, kolo::DType::F32, kolo::Op::Sum, {}, {}, "a");
    auto wb = comm.allreduce_async(b.data(), b.data(), 4, kolo::DType::F32, kolo::Op::Sum, {}, {}, "b");
    wb.wait();
    wa.wait();
    expect(false, "named operations completed without the rank that died");
  } catch (const kolo::Error& e) {
    std::printf("caught: %s\n", e.what());
  }
  try {
    comm.barrier();
    expect(false, "the communicator stayed usable after a rank died");
  } catch (const kolo::Error&) {
  }
  return 0;
}

// Horovod's join, over and over: each rank in turn joins first (the others'
// named allreduce runs with its zeros), then every rank joins, all leave
// together (an unnamed barrier: join's end) and at once issue the next named
// allreduce. No rank may still count as joined there: a round that took one
// as joined would run that allreduce with its zeros (a wrong sum here) and
// leave its own call waiting for a twin that never comes.
int join(int rounds) {
  auto comm = kolo::init();
  const int rank = comm.rank(), size = comm.size();
  auto named_sum = [&](const char* name, int mine) {
    std::vector<std::int32_t> v(7, mine);
    comm.allreduce_async(v.data(), v.data(), v.size(), kolo::DType::I32, kolo::Op::Sum, {}, {}, name).wait();
    return v[6];
  };
  for (int i = 0; i < rounds; ++i) {
    const int first = i % size;
    if (rank == first) {
      comm.set_joined(true);
    } else {
      const int got = named_sum("a", rank + 1);
      expect(got == size * (size + 1) / 2 - (first + 1), "round " + std::to_string(i) + ": 'a' with the joined rank's zeros");
      comm.set_joined(true);
    }
    comm.barrier();  // every rank has joined
    comm.set_joined(false);
    const int got = named_sum("b", rank + 1);
    expect(got == size * (size + 1) / 2, "round " + std::to_string(i) + ": 'b' right after leaving join, got " +
                                             std::to_string(got));
    if (failures) break;
  }
  comm.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "order") order();
    else if (mode == "mismatch") mismatch();
    else if (mode == "duplicate") duplicate();
    else if (mode == "stall") stall(false);
    else if (mode == "first-stall") stall(true);
    else if (mode == "die") die();
    else if (mode == "join") join(argc > 2 ? std::atoi(argv[2]) : 200);
    else {
      std::fprintf(stderr, "usage: kolo_named order|mismatch|duplicate|stall|first-stall|die|join [rounds]\n");
      return 2;
    }
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 3;
  }
  std::fflush(stdout);
  if (failures) return 3;
  std::printf("ok\n");
  return 0;
}
