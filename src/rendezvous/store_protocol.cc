#include "rendezvous/store_protocol.h"

#include <fmt/format.h>

namespace kolo::rdv::proto {

namespace {

void put_uint(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_uint(const char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

void put_str(std::string& out, const std::string& s) {
  put_uint(out, s.size(), 4);
  out += s;
}

std::string encode(std::uint8_t tag, std::int64_t number, const std::string& value,
                   const std::vector<std::string>& keys) {
  std::string out(kPrefixBytes, '\0');
  put_uint(out, tag, 1);
  put_uint(out, static_cast<std::uint64_t>(number), 8);
  put_str(out, value);
  put_uint(out, keys.size(), 4);
  for (const auto& k : keys) put_str(out, k);
  const std::uint64_t body = out.size() - kPrefixBytes;
  // The sender checks the limit too: better a clear error here than a
  // connection the server drops without telling why.
  if (body > kMaxBodyBytes)
    throw ProtocolError(fmt::format("message of {} bytes exceeds the limit of {} bytes", body,
                                    kMaxBodyBytes));
  for (std::size_t i = 0; i < kPrefixBytes; ++i) out[i] = static_cast<char>((body >> (8 * i)) & 0xff);
  return out;
}

// Bounds-checked cursor over a body: every length is compared with what is
// left before anything is allocated for it.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

  std::uint64_t uint(int bytes) {
    need(bytes, "integer");
    std::uint64_t v = get_uint(s_.data() + pos_, bytes);
    pos_ += bytes;
    return v;
  }
  std::string str() {
    const std::uint64_t n = uint(4);
    need(n, "string");
    std::string v(s_.substr(pos_, n));
    pos_ += n;
    return v;
  }
  std::vector<std::string> strs() {
    const std::uint64_t n = uint(4);
    // Each string takes at least its 4-byte length: a count that cannot fit
    // in the rest of the body is rejected before reserving for it.
    if (n > (s_.size() - pos_) / 4) throw ProtocolError(fmt::format("key count {} does not fit the message", n));
    std::vector<std::string> v;
    v.reserve(n);
    for (std::uint64_t i = 0; i < n; ++i) v.push_back(str());
    return v;
  }
  void finish() const {
    if (pos_ != s_.size())
      throw ProtocolError(fmt::format("{} unexpected bytes after the message", s_.size() - pos_));
  }

 private:
  void need(std::uint64_t n, const char* what) const {
    if (n > s_.size() - pos_)
      throw ProtocolError(fmt::format("truncated message: {} needs {} bytes, {} left", what, n,
                                      s_.size() - pos_));
  }
  std::string_view s_;
  std::size_t pos_ = 0;
};

struct Fields {
  std::uint8_t tag;
  std::int64_t number;
  std::string value;
  std::vector<std::string> keys;
};

Fields decode(std::string_view body) {
  Reader r(body);
  Fields f;
  f.tag = static_cast<std::uint8_t>(r.uint(1));
  f.number = static_cast<std::int64_t>(r.uint(8));
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
