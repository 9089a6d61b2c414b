#include "rendezvous/store_protocol.h"

#include <fmt/format.h>

namespace kolo::rdv::proto {

namespace {

std::uint64_t get_uint(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string encode(std::uint8_t tag, std::int64_t number, const std::string& value,
                   const std::vector<std::string>& keys) {
  net::Writer w;
  w.raw(std::string(kPrefixBytes, '\0'));
  w.u8(tag).u64(static_cast<std::uint64_t>(number)).str(value).strs(keys);
  std::string& out = w.bytes();
  const std::uint64_t body = out.size() - kPrefixBytes;
  // The sender checks the limit too: better a clear error here than a
  // connection the server drops without telling why.
  if (body > kMaxBodyBytes)
    throw ProtocolError(fmt::format("message of {} bytes exceeds the limit of {} bytes", body,
                                    kMaxBodyBytes));
  for (std::size_t i = 0; i < kPrefixBytes; ++i) out[i] = static_cast<char>((body >> (8 * i)) & 0xff);
  return std::move(out);
}

struct Fields {
  std::uint8_t tag;
  std::int64_t number;
  std::string value;
  std::vector<std::string> keys;
};

Fields decode(std::string_view body) {
  net::Reader r(body);
  Fields f;
  f.tag = r.u8();
  f.number = static_cast<std::int64_t>(r.u64());
  f.value = r.str();
  f.keys = r.strs();
  r.finish();
  return f;
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::Set: return "set";
    case Op::Get: return "get";
    case Op::Add: return "add";
    case Op::Wait: return "wait";
    case Op::Check: return "check";
    case Op::Time: return "time";
  }
  return "?";
}

std::string frame(const Request& r) {
  return encode(static_cast<std::uint8_t>(r.op), r.number, r.value, r.keys);
}

std::string frame(const Response& r) {
  return encode(static_cast<std::uint8_t>(r.status), r.number, r.value, r.keys);
}

std::uint64_t body_length(const char* prefix) {
  const std::uint64_t n = get_uint(prefix, kPrefixBytes);
  if (n > kMaxBodyBytes)
    throw ProtocolError(fmt::format("length prefix {} exceeds the limit of {} bytes", n, kMaxBodyBytes));
  return n;
}

bool take_frame(std::string& buf, std::string& body) {
  if (buf.size() < kPrefixBytes) return false;
  const std::uint64_t n = body_length(buf.data());
  if (buf.size() - kPrefixBytes < n) return false;
  body.assign(buf, kPrefixBytes, n);
  buf.erase(0, kPrefixBytes + n);
  return true;
}

Request parse_request(std::string_view body) {
  Fields f = decode(body);
  Request r;
  switch (f.tag) {
    case static_cast<std::uint8_t>(Op::Set):
    case static_cast<std::uint8_t>(Op::Get):
    case static_cast<std::uint8_t>(Op::Add):
      if (f.keys.size() != 1)
        throw ProtocolError(fmt::format("{} takes one key, got {}", op_name(Op(f.tag)), f.keys.size()));
      break;
    case static_cast<std::uint8_t>(Op::Wait):
    case static_cast<std::uint8_t>(Op::Check):
      break;
    case static_cast<std::uint8_t>(Op::Time):
      if (!f.keys.empty()) throw ProtocolError(fmt::format("time takes no key, got {}", f.keys.size()));
      break;
    default:
      throw ProtocolError(fmt::format("unknown command {}", f.tag));
  }
  r.op = Op(f.tag);
  r.number = f.number;
  r.value = std::move(f.value);
  r.keys = std::move(f.keys);
  return r;
}

Response parse_response(std::string_view body) {
  Fields f = decode(body);
  if (f.tag > static_cast<std::uint8_t>(Status::Error))
    throw ProtocolError(fmt::format("unknown reply status {}", f.tag));
  Response r;
  r.status = Status(f.tag);
  r.number = f.number;
  r.value = std::move(f.value);
  r.keys = std::move(f.keys);
  return r;
}

}  // namespace kolo::rdv::proto
