// The synthetic data set of the cache tests: sample i's record and label are
// pure functions of i and the transform name, computed here independently of
// kolo::data (the tests compare what the cache holds against them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cache_test {

inline std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline std::uint64_t name_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

constexpr std::int64_t kRows = 3, kCols = 5;  // fixed-shape records: [3, 5] f32

// fixed: kRows*kCols floats; otherwise 1 + i % 7 floats (records of varying length).
inline std::vector<float> sample(std::uint64_t i, const std::string& transform, bool fixed) {
  const std::size_t n = fixed ? kRows * kCols : 1 + i % 7;
  std::vector<float> v(n);
  for (std::size_t j = 0; j < n; ++j)
    v[j] = static_cast<float>(splitmix(name_hash(transform) ^ (i * 1000003 + j)) % 100000) / 1000.0f - 50.0f;
  return v;
}

inline std::int64_t label(std::uint64_t i) { return static_cast<std::int64_t>(i * 7 % 10) - 3; }

}  // namespace cache_test
