// Wire format of the rendezvous store.
//
// Every message is a frame: an 8-byte little-endian body length, then the
// body. The length is checked against kMaxBodyBytes before a single byte of
// the body is buffered, so a stray client (a port scanner, a wrong program, a
// length of 2^40) costs the server nothing but the connection it is closed on.
//
// Requests and replies share one body layout, written with net/codec.h:
//   u8 tag (Op or Status) | i64 number | str value | u32 count | count × str keys
// where str is a u32 length and that many bytes, all integers little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "net/codec.h"

namespace kolo::rdv::proto {

inline constexpr std::size_t kPrefixBytes = 8;
// Far above anything a rendezvous exchanges (addresses, small blobs), far
// below what would hurt a host to buffer.
inline constexpr std::uint64_t kMaxBodyBytes = 64ull << 20;

// Time: the server's clock (system_clock, ns since the epoch) in number; ranks
// align their timeline clocks with it (timeline/recorder.h).
enum class Op : std::uint8_t { Set = 1, Get = 2, Add = 3, Wait = 4, Check = 5, Time = 6 };
enum class Status : std::uint8_t { Ok = 0, Timeout = 1, Error = 2 };

struct Request {
  Op op = Op::Set;
  std::vector<std::string> keys;  // exactly one for Set, Get and Add
  std::string value;              // Set: the value
  std::int64_t number = 0;        // Get, Wait: timeout in ms; Add: the delta
};

struct Response {
  Status status = Status::Ok;
  std::string value;              // Get: the value; Error: the message
  std::int64_t number = 0;        // Add: the new value; Check: 1 when all keys exist; Time: the clock
  std::vector<std::string> keys;  // Timeout: the keys still missing
};

// A frame that breaks the format; the receiver drops the connection.
using net::ProtocolError;

const char* op_name(Op op);

// The complete frame (prefix and body) of a message.
std::string frame(const Request& r);
std::string frame(const Response& r);

// Reads the length prefix; throws ProtocolError when it exceeds kMaxBodyBytes.
std::uint64_t body_length(const char* prefix);

// When buf starts with a complete frame, moves its body into body, drops the
// frame from buf and returns true. Throws ProtocolError on an oversize prefix
// as soon as the prefix has arrived.
bool take_frame(std::string& buf, std::string& body);

// Throw ProtocolError on a malformed body.
Request parse_request(std::string_view body);
Response parse_response(std::string_view body);

}  // namespace kolo::rdv::proto
