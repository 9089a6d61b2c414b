// The reducer's bucket layout (include/kolo/reducer.h explains the rule).
#pragma once

#include <cstddef>
#include <vector>

#include "kolo/reducer.h"

namespace kolo::fusion {

// The dtype entry i travels in.
DType wire_dtype(DType entry, Wire wire);

// The entries' order before any step: reverse registration (the order
// backward usually finishes them, as DDP assumes).
std::vector<std::size_t> registration_order(std::size_t entries);

// Buckets of entry indices, each in buffer order: `order` (every entry once),
// cut at a dtype or place change or at the cap. Throws for an entry of a
// non-floating dtype (naming it and `what`).
// The order the rebuild lays entries out in, from the order they became ready
// (DDP's rule): walking `ready`, each dtype and place keeps one open group of
// at most the cap, so gradients of two dtypes readied interleaved still fill
// buckets together instead of cutting one another's; the groups follow one
// another in the order they completed (by their last entry), which is when
// each bucket can go. Where no two dtypes interleave, `ready` comes back.
std::vector<std::size_t> grouped_order(const std::vector<ReducerEntry>& entries,
                                       const std::vector<std::size_t>& ready, const ReducerOptions& o);

std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<ReducerEntry>& entries,
                                                   const std::vector<std::size_t>& order,
                                                   const ReducerOptions& o);

}  // namespace kolo::fusion
