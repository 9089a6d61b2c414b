// Writes one cache file atomically (private to kolo::data; rank 0 only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data_cache_format.h"

namespace kolo::data::detail {

// Records are appended in sample order; commit() writes the index and the
// header, fsyncs and puts the file in place. Destroying an uncommitted
// writer leaves no file behind (see cache.h for how a killed one does not).
class CacheWriter {
 public:
  CacheWriter(std::string path, CacheSpec spec);
  ~CacheWriter();
  CacheWriter(const CacheWriter&) = delete;
  CacheWriter& operator=(const CacheWriter&) = delete;

  void append(const std::uint8_t* data, std::uint64_t bytes, std::int64_t label);
  // Returns the file size.
  std::uint64_t commit();

  static std::string partial_path(const std::string& path) { return path + ".partial"; }

 private:
  void write(const void* p, std::uint64_t n);  // at the end, CRC updated
  void flush();
  std::string path_, partial_;
  CacheSpec spec_;
  int fd_ = -1;
  bool named_ = false;  // the temporary file has a name (no O_TMPFILE)
  bool committed_ = false;
  std::uint64_t pos_ = kHeaderBytes;
  std::uint32_t crc_ = 0;
  std::vector<std::uint8_t> buf_;     // pending bytes, written in large pieces
  std::vector<std::uint64_t> index_;  // offset, length, label per record
};

}  // namespace kolo::data::detail
