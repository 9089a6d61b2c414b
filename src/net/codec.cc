#include "net/codec.h"

#include <fmt/format.h>

namespace kolo::net {

Writer& Writer::uint(std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return *this;
}

Writer& Writer::str(std::string_view s) {
  u32(static_cast<std::uint32_t>(s.size()));
  return raw(s);
}

Writer& Writer::strs(const std::vector<std::string>& v) {
  u32(static_cast<std::uint32_t>(v.size()));
  for (const auto& s : v) str(s);
  return *this;
}

Writer& Writer::raw(std::string_view s) {
  out_.append(s);
  return *this;
}

std::string_view Reader::take(std::uint64_t n, const char* what) {
  if (n > in_.size())
    throw ProtocolError(fmt::format("truncated message: {} needs {} bytes, {} left", what, n, in_.size()));
  auto out = in_.substr(0, n);
  in_.remove_prefix(n);
  return out;
}

std::uint64_t Reader::uint(int bytes) {
  const std::string_view b = take(bytes, "integer");
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{static_cast<unsigned char>(b[i])} << (8 * i);
  return v;
}

std::string Reader::str() { return std::string(take(u32(), "string")); }

std::vector<std::string> Reader::strs() {
  const std::uint32_t n = u32();
  // Each string takes at least its 4-byte length: a count that cannot fit in
  // the rest of the message is rejected before reserving for it.
  if (n > in_.size() / 4) throw ProtocolError(fmt::format("count {} does not fit the message", n));
  std::vector<std::string> v;
  v.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) v.push_back(str());
  return v;
}

std::string_view Reader::rest() { return take(in_.size(), "rest"); }

void Reader::finish() const {
  if (!in_.empty()) throw ProtocolError(fmt::format("{} unexpected bytes after the message", in_.size()));
}

}  // namespace kolo::net
