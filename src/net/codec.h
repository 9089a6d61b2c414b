// The one codec of kolo's wire formats: little-endian integers and
// length-prefixed strings, written by Writer and read back by Reader, which
// checks every length against what is left before it allocates for it. The
// store's messages (rendezvous/store_protocol.h) and kolorun's agent frames
// (tools/kolorun/agent_protocol.h) are both made of these; each format keeps
// its own framing and fields.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kolo::net {

// Bytes that break a format: a peer of another program or version, or a
// corrupt stream. The receiver drops the connection (or the job) on it.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Writer {
 public:
  Writer& u8(std::uint8_t v) { return uint(v, 1); }
  Writer& u32(std::uint32_t v) { return uint(v, 4); }
  Writer& u64(std::uint64_t v) { return uint(v, 8); }
  Writer& str(std::string_view s);                  // u32 length, bytes
  Writer& strs(const std::vector<std::string>& v);  // u32 count, each a str
  Writer& raw(std::string_view s);
  const std::string& bytes() const { return out_; }
  std::string& bytes() { return out_; }

 private:
  Writer& uint(std::uint64_t v, int bytes);
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  std::uint8_t u8() { return static_cast<std::uint8_t>(uint(1)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(uint(4)); }
  std::uint64_t u64() { return uint(8); }
  std::string str();
  std::vector<std::string> strs();
  std::string_view rest();
  // Throws unless every byte was read.
  void finish() const;

 private:
  std::uint64_t uint(int bytes);
  std::string_view take(std::uint64_t n, const char* what);
  std::string_view in_;
};

}  // namespace kolo::net
