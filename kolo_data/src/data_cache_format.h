// The cache file format (private to kolo::data). All integers little-endian.
//
//   header, 4096 bytes (so that the records start page-aligned):
//     0    8  magic "KOLOCACH"
//     8    4  format version (1)
//    12    4  header bytes (4096)
//    16    8  number of samples n
//    24    8  inputs fingerprint
//    32    8  index offset (64-aligned)
//    40    8  file size (index offset + 24·n)
//    48    4  CRC-32 (zlib) of bytes [4096, file size)
//    52    1  dtype (kolo::DType)
//    53    1  number of dimensions (0..8)
//    54    2  transform length (0..255)
//    56   64  shape, 8 × i64 (unused dimensions 0)
//   120  255  transform name and version (unused bytes 0)
//  4092    4  CRC-32 of bytes [0, 4092)
//   records, in sample order, each at a 64-byte aligned offset (zero padding)
//   index, n × {u64 offset, u64 length, i64 label} (offsets from the file's start)
//
// Nothing in the file depends on the number of ranks, the time or the host:
// the same inputs and transform give the same bytes.
#pragma once

#include <cstdint>
#include <string>

#include "kolo/data/cache.h"

namespace kolo::data::detail {

constexpr char kMagic[8] = {'K', 'O', 'L', 'O', 'C', 'A', 'C', 'H'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint64_t kHeaderBytes = 4096;
constexpr std::uint64_t kAlign = 64;
constexpr std::uint64_t kIndexEntryBytes = 24;
constexpr std::size_t kMaxDims = 8;
constexpr std::size_t kMaxTransform = 255;

constexpr std::uint64_t align_up(std::uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// What the header says.
struct Header {
  CacheSpec spec;
  std::uint64_t index_offset = 0;
  std::uint64_t file_size = 0;
  std::uint32_t payload_crc = 0;
};

std::string encode_header(const Header& h);  // kHeaderBytes bytes, header CRC included

// The verdict on an existing file. Foreign: not a kolo cache (refused);
// Damaged: a kolo cache that cannot be used (truncated, corrupt, other format
// version); Ok: usable, `header` filled in.
enum class Health { Missing, Foreign, Damaged, Ok };
struct Inspection {
  Health health = Health::Missing;
  std::string problem;  // e.g. "truncated: the header says 1000 bytes, the file has 900"
  Header header;
};

// Reads and checks a file of `size` bytes mapped at p (p may be null when
// size is 0). verify: also the payload CRC (the index is always checked).
Inspection inspect(const std::uint8_t* p, std::uint64_t size, bool verify);

// "" when equal, else the first difference, e.g. "transform 'a/v1' != 'a/v2'".
std::string spec_difference(const CacheSpec& have, const CacheSpec& want);

// Checks a spec before building: dimensions, transform length. Throws.
void check_spec(const CacheSpec& spec);

// Bytes a record of this spec must have; 0 when the spec has no shape.
std::uint64_t record_bytes(const CacheSpec& spec);

std::uint32_t crc32_update(std::uint32_t crc, const void* p, std::uint64_t n);

// "[1, 28, 28] f32"
std::string describe(const CacheSpec& spec);

}  // namespace kolo::data::detail
