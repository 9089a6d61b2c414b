// The benchmark's input values and the host's expected results.
//
// Inputs are small integers that depend on the rank and the element index, so
// that every sum, min, max, product and average of up to 64 ranks is exact in
// every type (bf16 holds integers up to 256 exactly) and the expected result
// does not depend on the order an algorithm combines the ranks in: the check is
// plain equality, with no tolerance to hide an error behind.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kolo/kolo.h"

namespace kolo_bench {

// Element i of `buf` of type t, converted from/to double. Values must be
// integers the type holds exactly (all that this file produces are).
void put(kolo::DType t, void* buf, std::size_t i, double v);
double get(kolo::DType t, const void* buf, std::size_t i);

// What rank `rank` of `n` contributes at element i to a reduction with op.
double reduce_input(kolo::DType t, kolo::Op op, int rank, int n, std::size_t i);
// The reduction over all n ranks of reduce_input(..., i), in type t (integer
// types wrap as the library's do).
double reduce_expected(kolo::DType t, kolo::Op op, int n, std::size_t i);

// What rank `rank` holds at element i of a data-movement collective (broadcast,
// allgather, alltoall): distinct per rank, periodic in i with period 251.
double move_value(kolo::DType t, int rank, std::size_t i);

// Fills count elements of buf with a value no check expects (NaN for floats),
// so that an element the collective failed to write is counted as wrong.
void poison(kolo::DType t, void* buf, std::size_t count);

// Loops over a buffer (the host side is not timed; clarity beats speed here).
// fill: buf[i] = f(first + i); mismatches: #i with get(buf, i) != f(first + i).
template <class F>
void fill(kolo::DType t, void* buf, std::size_t count, std::size_t first, F&& f) {
  for (std::size_t i = 0; i < count; ++i) put(t, buf, i, f(first + i));
}
template <class F>
std::size_t mismatches(kolo::DType t, const void* buf, std::size_t count, std::size_t first, F&& f) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += get(t, buf, i) != f(first + i);
  return wrong;
}

}  // namespace kolo_bench
