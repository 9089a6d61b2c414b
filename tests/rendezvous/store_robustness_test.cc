// The server against clients that do not follow the protocol: raw sockets
// send garbage, oversize or malformed frames, pipelines, or vanish mid-wait.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <poll.h>

#include <chrono>
#include <thread>

#include "rendezvous/store.h"
#include "rendezvous/store_protocol.h"
#include "test_util.h"

namespace kolo::rdv {
namespace {

using namespace std::chrono_literals;

// A plain blocking TCP connection to the server, authenticated with the
// test key (what comes after is up to the test), or not at all.
class RawConn {
 public:
  explicit RawConn(int port, bool authenticate = true) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    if (authenticate) {
      const auth::Outcome o = auth::connect_handshake(fd_, test::key(), auth::Channel::Store, {},
                                                      std::chrono::steady_clock::now() + 5s);
      EXPECT_EQ(o.status, auth::Outcome::Accepted) << o.detail;
    }
  }
  ~RawConn() { ::close(fd_); }

  void send(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL), ssize_t(bytes.size()));
  }
  // True when the server closed the connection within the timeout.
  bool closed_by_server(std::chrono::milliseconds timeout = 2000ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return false;
    char c;
    return ::recv(fd_, &c, 1, 0) <= 0;
  }
  // The next reply; several may arrive in one read.
  proto::Response reply() {
    std::string body;
    char chunk[4096];
    while (!proto::take_frame(in_, body)) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 5000) != 1) throw std::runtime_error("no reply within 5 s");
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) throw std::runtime_error("connection closed");
      in_.append(chunk, n);
    }
    return proto::parse_response(body);
  }
  void close() { ::shutdown(fd_, SHUT_RDWR); }

 private:
  int fd_;
  std::string in_;  // received bytes not yet parsed
};

std::string length_prefix(std::uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return s;
}

class StoreRobustness : public ::testing::Test {
 protected:
  // The server still answers a well-behaved client.
  void expect_server_alive() {
    StoreClient c("127.0.0.1", server.port(), 1000ms, test::key());
    EXPECT_EQ(c.add("alive", 1), ++alive_count);
  }
  StoreServer server{"127.0.0.1", 0, test::key()};
  int alive_count = 0;
};

TEST_F(StoreRobustness, GarbageClosesThatConnectionOnly) {
  StoreClient bystander("127.0.0.1", server.port(), 1000ms, test::key());
  bystander.set("k", "v");
  RawConn raw(server.port());  // authenticated: garbage after the handshake
  raw.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(raw.closed_by_server());
  EXPECT_EQ(bystander.get("k", 100ms), "v");
  expect_server_alive();
}

TEST_F(StoreRobustness, OversizeLengthPrefixIsRejectedBeforeAllocating) {
  // 2^40 bytes could not be allocated: a server that tried would die here.
  RawConn huge(server.port());
  huge.send(length_prefix(std::uint64_t(1) << 40));
  EXPECT_TRUE(huge.closed_by_server());
  RawConn just_over(server.port());
  just_over.send(length_prefix(proto::kMaxBodyBytes + 1));
  EXPECT_TRUE(just_over.closed_by_server());
  expect_server_alive();
}

TEST_F(StoreRobustness, PartialFrameAtTheLimitIsKeptWaitingNotClosed) {
  RawConn raw(server.port());
  raw.send(length_prefix(proto::kMaxBodyBytes) + "abc");
  EXPECT_FALSE(raw.closed_by_server(200ms));
  expect_server_alive();
}

TEST_F(StoreRobustness, MalformedBodiesCloseTheConnection) {
  const std::string truncated = length_prefix(3) + std::string("\x01\x00\x00", 3);
  proto::Request unknown;
  unknown.keys = {"k"};
  std::string bad_op = proto::frame(unknown);
  bad_op[proto::kPrefixBytes] = 99;
  proto::Request two_keys{proto::Op::Get, {"a", "b"}, "", 0};
  std::string trailing = proto::frame(proto::Request{proto::Op::Set, {"k"}, "v", 0});
  trailing[0] = static_cast<char>(trailing[0] + 1);  // the body claims one more byte...
  trailing += 'x';                                    // ...that is not part of the message
  // A key count far beyond what the body holds must not be reserved for.
  std::string many_keys = proto::frame(proto::Request{proto::Op::Check, {}, "", 0});
  many_keys.replace(many_keys.size() - 4, 4, "\xff\xff\xff\x7f");
  for (const std::string& frame : {truncated, bad_op, proto::frame(two_keys), trailing, many_keys}) {
    RawConn raw(server.port());
    raw.send(frame);
    EXPECT_TRUE(raw.closed_by_server());
  }
  expect_server_alive();
}

TEST_F(StoreRobustness, PipelinedRequestsAreAnsweredInOrder) {
  RawConn raw(server.port());
  // A get that parks, then a set of the key it waits for, in one write: the
  // set is not read before the get is answered, so the get times out first.
  raw.send(proto::frame(proto::Request{proto::Op::Get, {"p"}, "", 100}) +
           proto::frame(proto::Request{proto::Op::Set, {"p"}, "1", 0}) +
           proto::frame(proto::Request{proto::Op::Add, {"n"}, "", 2}) +
           proto::frame(proto::Request{proto::Op::Get, {"p"}, "", 0}));
  proto::Response get = raw.reply();
  EXPECT_EQ(get.status, proto::Status::Timeout);
  EXPECT_EQ(get.keys, std::vector<std::string>{"p"});
  EXPECT_EQ(raw.reply().status, proto::Status::Ok);
  EXPECT_EQ(raw.reply().number, 2);
  EXPECT_EQ(raw.reply().value, "1");
}

TEST_F(StoreRobustness, ClientVanishingWhileParkedDoesNotDisturbOthers) {
  {
    RawConn raw(server.port());
    raw.send(proto::frame(proto::Request{proto::Op::Wait, {"never"}, "", 60000}));
    std::this_thread::sleep_for(50ms);
    raw.close();
  }
  expect_server_alive();
  // Setting the key the vanished client waited for must not reply to it.
  StoreClient c("127.0.0.1", server.port(), 1000ms, test::key());
  c.set("never", "now");
  expect_server_alive();
}

TEST_F(StoreRobustness, ClientRefusesAnOversizeValue) {
  StoreClient c("127.0.0.1", server.port(), 1000ms, test::key());
  const std::string e = test::error_of([&] { c.set("big", std::string(proto::kMaxBodyBytes, 'x')); });
  EXPECT_NE(e.find("cannot set key big"), std::string::npos) << e;
  c.set("small", "ok");  // nothing was sent: the connection is intact
  EXPECT_EQ(c.get("small", 100ms), "ok");
}

}  // namespace
}  // namespace kolo::rdv
