// Ranges of a buffer: whether two byte ranges share a byte (the buffer
// checks of the collectives, the GPU host plane's staging), and a buffer's
// pieces, one per rank (the sharded reductions of every data plane).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace kolo {

inline bool overlap(const void* a, std::size_t an, const void* b, std::size_t bn) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

// Splits count elements into `parts` contiguous pieces as equal as possible;
// returns the first element of piece i (piece_begin(count, parts, parts) == count).
inline std::size_t piece_begin(std::size_t count, int parts, int i) {
  return count / parts * i + std::min<std::size_t>(i, count % parts);
}

}  // namespace kolo
