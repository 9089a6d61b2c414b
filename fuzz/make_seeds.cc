// Writes the seed inputs of the fuzz targets (valid messages of every kind)
// into fuzz/corpus/<target>/seed-*: scripts/fuzz.sh runs it when a corpus
// directory is missing.
#include <cstdio>
#include <fstream>
#include <string>

#include "net/auth.h"
#include "rendezvous/store_protocol.h"

namespace proto = kolo::rdv::proto;
namespace auth = kolo::auth;

namespace {

void write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/seed-" + name, std::ios::binary) << bytes;
}

template <class A>
std::string str(const A& a) {
  return std::string(a.begin(), a.end());
}

std::string body(const std::string& frame) { return frame.substr(proto::kPrefixBytes); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: make_seeds STORE_PROTOCOL_DIR HANDSHAKE_DIR\n");
    return 2;
  }
  const std::string sp = argv[1], hs = argv[2];
  using proto::Op;
  write(sp, "set", body(proto::frame(proto::Request{Op::Set, {"kolo/comm0/addr/1"}, "10.0.0.2:41234", 0})));
  write(sp, "get", body(proto::frame(proto::Request{Op::Get, {"kolo/comm0/addr/0"}, "", 120000})));
  write(sp, "add", body(proto::frame(proto::Request{Op::Add, {"counter"}, "", -3})));
  write(sp, "wait", body(proto::frame(proto::Request{Op::Wait, {"a", "b", "c"}, "", 5000})));
  write(sp, "check", body(proto::frame(proto::Request{Op::Check, {}, "", 0})));
  write(sp, "reply-ok", body(proto::frame(proto::Response{proto::Status::Ok, "value", 7, {}})));
  write(sp, "reply-timeout", body(proto::frame(proto::Response{proto::Status::Timeout, "", 0, {"x", "y"}})));
  write(sp, "reply-error", body(proto::frame(proto::Response{proto::Status::Error, "add: counter overflows", 0, {}})));
  write(sp, "stream", proto::frame(proto::Request{Op::Set, {"k"}, "v", 0}) +
                          proto::frame(proto::Request{Op::Get, {"k"}, "", 10}));

  const auth::Key key = auth::Key::from_secret("kolo fuzz secret");
  for (auth::Channel channel : {auth::Channel::Store, auth::Channel::Data}) {
    const bool data = channel == auth::Channel::Data;
    const auth::Challenge ch = auth::make_challenge(channel, data ? 0 : -1);
    const auth::Answer ans = auth::make_answer(key, ch, {data ? 1 : -1, data ? 2 : 0, data ? 0 : -1});
    const std::string name = data ? "data" : "store";
    write(hs, name + "-accepted", str(ch) + str(ans) + str(auth::make_verdict(&key, ch, ans, true)));
    write(hs, name + "-rejected", str(ch) + str(ans) + str(auth::make_verdict(nullptr, ch, ans, false)));
    write(hs, name + "-challenge", str(ch));
  }
  const auth::Challenge open = auth::make_challenge(auth::Channel::Store, -1, /*open=*/true);
  const auth::Answer ans = auth::make_answer(key, open, {});
  write(hs, "store-open", str(open) + str(ans) + str(auth::make_verdict(nullptr, open, ans, true)));
  return 0;
}
