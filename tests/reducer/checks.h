// What check_reducer.cc and check_autotune.cc share: this rank and the
// world's size, a check that counts failures and says them by rank, and
// main()'s frame.
#pragma once

#include <cstdio>
#include <exception>
#include <string>

#include "kolo/kolo.h"

namespace reducer_test {

inline int failures = 0;
inline int R = 0, N = 1;

inline void check(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("rank %d FAILED: %s\n", R, what.c_str());
    ++failures;
  }
}

// main(): runs body(comm) on this rank; prints "rank R ok" and returns 0,
// or returns 3 after the failures were said (an exception is said here).
template <class Body>
int run(Body body) {
  try {
    kolo::Communicator comm = kolo::init();
    R = comm.rank();
    N = comm.size();
    body(comm);
  } catch (const std::exception& e) {
    std::printf("rank %d FAILED: %s\n", R, e.what());
    return 3;
  }
  if (failures) return 3;
  std::printf("rank %d ok\n", R);
  return 0;
}

}  // namespace reducer_test
