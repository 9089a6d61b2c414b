// Ranks that disagree about the 6th collective: rank 1 differs in the op,
// dtype, count, root, reduction or tensor shape (argv[1]), or ("vector") receives a
// broadcast into a std::vector one element shorter than the other ranks', or
// expects an alltoallv block longer than its sender sends ("alltoallv"), or
// calls alltoall where the others call alltoallv ("alltoallv_call").
// Every rank must fail with an error that shows both calls. Prints "caught: <error>" and exits 3 on
// failure, 0 if the mismatch went unnoticed (which the test treats as a
// failure). With a directory as argv[2], a failed rank waits (up to 30 s)
// until every rank has left a file there before exiting, so that kolorun's
// teardown after the first exit cannot cut another rank's report short.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <fstream>
#include <thread>
#include <cstring>
#include <string>
#include <vector>

#include "kolo/kolo.h"

// "recover": rank 1 allreduces 999 elements where the others allreduce 1000
// (caught); "recover-alltoallv": rank 1 expects one element more from rank 0
// than rank 0 sends it in an alltoallv (caught by every rank in the counts
// exchange). Then every rank checks that correct collectives give exact
// results — on the same communicator if the error says it remains usable
// (prints "recovered"), else after the next call failed with "unusable" on
// a new one from kolo::init() (prints "reformed") — and then on one more
// new communicator (a healthy one dropped and formed again). Exits 0 or 3.
// Rank r sends q+1 elements of value 100*r + q to rank q; rank `greedy`
// expects one more from rank 0 (-1: nobody). Returns whether what arrived is right.
static bool alltoallv_round(kolo::Communicator& comm, int greedy) {
  const int rank = comm.rank(), size = comm.size();
  std::vector<std::size_t> send(size), recv(size, static_cast<std::size_t>(rank) + 1);
  std::vector<float> in, out(static_cast<std::size_t>(size) * (rank + 1) + 1, -1.0f);
  for (int q = 0; q < size; ++q) {
    send[q] = static_cast<std::size_t>(q) + 1;
    in.insert(in.end(), send[q], static_cast<float>(100 * rank + q));
  }
  if (rank == greedy) ++recv[0];
  comm.alltoallv(in.data(), send, {}, out.data(), recv, {}, kolo::DType::F32);
  for (int q = 0; q < size; ++q)
    for (int i = 0; i <= rank; ++i)
      if (out[static_cast<std::size_t>(q) * (rank + 1) + i] != static_cast<float>(100 * q + rank)) return false;
  return true;
}

static int recover(bool alltoallv) {
  std::string how;
  try {
    auto comm = std::make_unique<kolo::Communicator>(kolo::init());
    const int rank = comm->rank(), size = comm->size();
    std::vector<float> f(1000, 1.0f);
    comm->allreduce(f.data(), f.size(), kolo::Op::Sum);
    bool usable = false;
    try {
      if (alltoallv)
        alltoallv_round(*comm, 1);
      else
        comm->allreduce(f.data(), rank == 1 ? 999 : 1000, kolo::Op::Sum);
      std::printf("no error\n");
      return 3;
    } catch (const kolo::Error& e) {
      usable = std::strstr(e.what(), "the communicator remains usable") != nullptr;
      std::printf("mismatch: %s\n", e.what());
    }
    if (!usable) {
      try {
        comm->barrier();
        std::printf("the call after an unrecovered mismatch did not fail\n");
        return 3;
      } catch (const kolo::Error& e) {
        if (!std::strstr(e.what(), "unusable")) throw;
      }
      comm = std::make_unique<kolo::Communicator>(kolo::init());
    }
    for (int round = 0; round < 2; ++round) {
      // Values that tell ranks and rounds apart: exact sums in float.
      std::vector<float> x(100000);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((rank + 1) * (i % 7 + round));
      comm->allreduce(x.data(), x.size(), kolo::Op::Sum);
      for (std::size_t i = 0; i < x.size(); ++i)
        if (x[i] != static_cast<float>(size * (size + 1) / 2 * (i % 7 + round))) {
          std::printf("wrong allreduce result at %zu: %g\n", i, x[i]);
          return 3;
        }
      std::vector<int> b(10, rank == 2 % size ? 42 + round : -1);
      kolo::Work w = comm->broadcast_async(b.data(), b.size(), kolo::DType::I32, 2 % size);
      w.wait();
      for (int v : b)
        if (v != 42 + round) {
          std::printf("wrong broadcast result %d\n", v);
          return 3;
        }
      if (!alltoallv_round(*comm, -1)) {
        std::printf("wrong alltoallv result\n");
        return 3;
      }
      comm->barrier();
      comm.reset();  // the second round runs on a communicator formed anew
      comm = std::make_unique<kolo::Communicator>(kolo::init());
    }
    std::printf("%s\n", usable ? "recovered" : "reformed");
    return 0;
  } catch (const std::exception& e) {
    std::printf("caught: %s\n", e.what());
    return 3;
  }
}

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "op";
  if (what == "recover" || what == "recover-alltoallv") return recover(what == "recover-alltoallv");
  try {
    kolo::Communicator comm = kolo::init();
    std::vector<float> f(1000, 1.0f);
    std::vector<double> d(1000, 1.0);
    for (int i = 0; i < 5; ++i) comm.allreduce(f.data(), f.size(), kolo::Op::Sum);
    const bool odd = comm.rank() == 1;
    if (what == "op") {
      if (odd) comm.broadcast(f.data(), f.size(), kolo::DType::F32, 0);
      else comm.allreduce(f.data(), f.size(), kolo::Op::Sum);
    } else if (what == "dtype") {
      if (odd) comm.allreduce(d.data(), d.size(), kolo::Op::Sum);
      else comm.allreduce(f.data(), f.size(), kolo::Op::Sum);
    } else if (what == "count") {
      comm.allreduce(f.data(), odd ? 999 : 1000, kolo::Op::Sum);
    } else if (what == "root") {
      comm.broadcast(f.data(), f.size(), kolo::DType::F32, odd ? 1 : 0);
    } else if (what == "vector") {
      std::vector<float> v(odd ? 999 : 1000);
      comm.broadcast(v, 0);
    } else if (what == "shape") {  // one count in two shapes, as Horovod's shape check
      comm.allreduce(f.data(), f.data(), f.size(), kolo::DType::F32, kolo::Op::Sum,
                     odd ? std::vector<std::int64_t>{10, 100} : std::vector<std::int64_t>{1000});
    } else if (what == "alltoallv") {  // rank 1 expects 4 elements from rank 2, which sends it 3
      std::vector<std::size_t> send(comm.size(), 3), recv(comm.size(), 3);
      if (odd) recv[2] = 4;
      comm.alltoallv(f.data(), send, {}, d.data(), recv, {}, kolo::DType::F32);
    } else if (what == "alltoallv_call") {  // rank 1 calls the equal-block alltoall
      std::vector<std::size_t> counts(comm.size(), 3);
      if (odd) comm.alltoall(f.data(), d.data(), 3, kolo::DType::F32);
      else comm.alltoallv(f.data(), counts, {}, d.data(), counts, {}, kolo::DType::F32);
    } else if (what == "reduction") {
      comm.allreduce(f.data(), f.size(), odd ? kolo::Op::Max : kolo::Op::Sum);
    }
    comm.barrier();
    std::printf("no error\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
    if (argc > 2) {
      namespace fs = std::filesystem;
      const int size = std::atoi(std::getenv("KOLO_SIZE"));
      std::ofstream(fs::path(argv[2]) / ("done." + std::string(std::getenv("KOLO_RANK"))));
      for (int i = 0; i < 3000; ++i) {
        int done = 0;
        for (auto& f : fs::directory_iterator(argv[2])) done += f.path().filename().string().rfind("done.", 0) == 0;
        if (done >= size) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    return 3;
  }
}
