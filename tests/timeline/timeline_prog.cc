// A known program for the timeline tests: every collective once (one
// allreduce named as Horovod's API names it, one large allreduce), three
// asynchronous allreduces in flight, a caller's span, and a "straggle"
// allreduce before which one rank sleeps. timeline_test.sh runs it under
// kolorun with KOLO_TIMELINE and check_trace.py checks the file.
//
//   timeline_prog [--sleep-rank R] [--sleep-ms MS] [--start-stop PATH N] [--linger-s S]
// --start-stop: no KOLO_TIMELINE; start and stop the timeline N times around
//   the program, session i writing PATH.i.
// --linger-s: sleep that long after the collectives, timeline still on (the
//   killed-job test kills the job then).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kolo/kolo.h"

using namespace kolo;

namespace {

void program(Communicator& c, int sleep_rank, int sleep_ms) {
  const int n = c.size();
  std::vector<float> small(1000, 1.0f), large(1 << 20, 1.0f), all(1000 * n), blocks(1000 * n, 1.0f);
  timeline::name_next("grad.a");
  c.allreduce(small.data(), small.data(), small.size(), DType::F32, Op::Sum);
  c.allreduce(large.data(), large.data(), large.size(), DType::F32, Op::Average);
  c.broadcast(small.data(), small.size(), DType::F32, 0);
  c.allgather(small.data(), all.data(), small.size(), DType::F32);
  c.reduce_scatter(blocks.data(), small.data(), small.size(), DType::F32, Op::Sum);
  c.alltoall(blocks.data(), all.data(), small.size(), DType::F32);
  c.barrier();
  const std::int64_t t0 = timeline::now_ns();
  std::vector<std::vector<float>> bufs(3, std::vector<float>(1 << 16, 2.0f));
  std::vector<Work> works;
  for (auto& b : bufs) works.push_back(c.allreduce_async(b.data(), b.data(), b.size(), DType::F32, Op::Sum));
  for (auto& w : works) w.wait();
  timeline::span("test", "step", t0, timeline::now_ns(), "\"buffers\": 3");
  if (c.rank() == sleep_rank) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  timeline::name_next("straggle");
  c.allreduce(small.data(), small.data(), small.size(), DType::F32, Op::Sum);
}

}  // namespace

int main(int argc, char** argv) {
  int sleep_rank = -1, sleep_ms = 300, cycles = 0;
  double linger_s = 0;
  std::string start_stop;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sleep-rank" && i + 1 < argc) sleep_rank = std::atoi(argv[++i]);
    else if (a == "--sleep-ms" && i + 1 < argc) sleep_ms = std::atoi(argv[++i]);
    else if (a == "--linger-s" && i + 1 < argc) linger_s = std::atof(argv[++i]);
    else if (a == "--start-stop" && i + 2 < argc) {
      start_stop = argv[++i];
      cycles = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "timeline_prog: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    Communicator c = init();
    if (cycles > 0) {
      for (int i = 0; i < cycles; ++i) {
        timeline::start(c, start_stop + "." + std::to_string(i));
        program(c, sleep_rank, sleep_ms);
        timeline::stop();
        timeline::stop();  // a second stop does nothing
      }
      c.barrier();  // not recorded: the timeline is off
    } else {
      program(c, sleep_rank, sleep_ms);
    }
    if (linger_s > 0) {
      std::printf("lingering\n");
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::duration<double>(linger_s));
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
