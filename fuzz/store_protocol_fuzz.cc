// libFuzzer target: the rendezvous store's wire format (store_protocol.h),
// which the store parses from every authenticated client and the client
// parses from the store. The input is taken as one message body and as a
// byte stream of frames. Besides "no crash, no leak, no undefined behaviour",
// it checks that the encoding is canonical: a body that parses re-encodes to
// exactly the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "rendezvous/store_protocol.h"

namespace proto = kolo::rdv::proto;

namespace {

// The body of frame(m), checked through take_frame as the receiver sees it.
template <class Message>
std::string reencoded_body(const Message& m) {
  std::string buf = proto::frame(m), body;
  if (!proto::take_frame(buf, body) || !buf.empty()) std::abort();
  return body;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  try {
    const proto::Request r = proto::parse_request(input);
    if (reencoded_body(r) != input) std::abort();
    if (proto::parse_request(reencoded_body(r)).keys != r.keys) std::abort();
  } catch (const proto::ProtocolError&) {
  }
  try {
    const proto::Response r = proto::parse_response(input);
    if (reencoded_body(r) != input) std::abort();
  } catch (const proto::ProtocolError&) {
  }

  // As a stream: frames one after another, as the server buffers them.
  std::string stream(input), body;
  try {
    while (proto::take_frame(stream, body)) {
      if (body.size() > proto::kMaxBodyBytes) std::abort();
      try {
        proto::parse_request(body);
      } catch (const proto::ProtocolError&) {
      }
    }
    // Whatever is left is an incomplete frame whose prefix is within the limit.
    if (stream.size() >= proto::kPrefixBytes && proto::body_length(stream.data()) <= stream.size() - proto::kPrefixBytes)
      std::abort();
  } catch (const proto::ProtocolError&) {
  }
  return 0;
}
