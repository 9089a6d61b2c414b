// Whether two byte ranges share a byte: the buffer checks of the collectives
// (a collective's input and output must not overlap) and the GPU host
// plane's staging (overlapping device buffers are staged as one block).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kolo {

inline bool overlap(const void* a, std::size_t an, const void* b, std::size_t bn) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

}  // namespace kolo
