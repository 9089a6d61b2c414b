// The store client: one blocking TCP connection, one request in flight at a
// time (a mutex lets several threads share a client). Every read has a
// deadline, so a store host that vanishes without closing the connection
// still ends in an error instead of a hang.
//
// Before its first request the client authenticates (auth.h) and checks the
// store's proof: a store of another job (a different KOLO_SECRET, or a stale
// store on a reused port) is a clear error at once, never a hang or a
// conversation with the wrong job.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <optional>
#include <thread>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "rendezvous/store.h"
#include "rendezvous/store_protocol.h"
#include "net/address.h"
#include "net/socket.h"

namespace kolo::rdv {

using net::Fd;

namespace {

using Clock = std::chrono::steady_clock;

// How long past a request's own timeout the client waits for the reply. The
// server answers every request by its deadline; this only covers a store
// whose host died without closing the connection.
constexpr Millis kReplyGrace{30000};

std::string join(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return s;
}

}  // namespace

struct StoreClient::Impl {
  std::string host;
  int port = 0;
  Fd fd;
  std::mutex mu;
  std::optional<auth::Key> key;  // always set once constructed
  std::string host_rank;         // set_host(); empty: a launcher's store

  proto::Response call(const proto::Request& req, Millis timeout);
  void send_all(const std::string& bytes);
  void recv_exact(char* p, std::size_t n, Clock::time_point deadline);
  [[noreturn]] void lost(const std::string& why);
};

StoreClient::StoreClient(const std::string& host, int port, Millis connect_timeout, const auth::Key& key,
                         const auth::Identity& me)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = host;
  impl_->port = port;
  impl_->key = key;
  const auto deadline = Clock::now() + connect_timeout;
  Millis backoff{10};
  std::string why;
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    impl_->fd = net::try_connect(host, port, std::max(left, Millis{1}), &why);
    if (impl_->fd.valid()) {
      // A store answers at once; the floor covers a short connect timeout.
      const auto hs_deadline = std::max(deadline, Clock::now() + auth::kAnswerTimeout);
      const auth::Outcome o =
          auth::connect_handshake(impl_->fd.get(), key, auth::Channel::Store, me, hs_deadline);
      switch (o.status) {
        case auth::Outcome::Accepted:
          net::set_peer_timeout(impl_->fd.get());
          if (o.open)
            log(LogLevel::Info, "rendezvous: the store at {}:{} does not check the job's secret "
                "(started without the job's key)", host, port);
          return;
        case auth::Outcome::Rejected:
          impl_->fd.reset();
          fail("rendezvous: the store at {}:{} rejected this rank's credentials (different job or "
               "KOLO_SECRET?)", host, port);
        case auth::Outcome::Forged:
          impl_->fd.reset();
          fail("rendezvous: the store at {}:{} could not prove it knows this job's secret: it "
               "belongs to another job (different KOLO_SECRET, or a stale store on a reused port)",
               host, port);
        case auth::Outcome::NotKolo:
        case auth::Outcome::WrongPeer:
          impl_->fd.reset();
          fail("rendezvous: {}:{} is not a kolo rendezvous store ({})", host, port, o.detail);
        case auth::Outcome::TimedOut:
          impl_->fd.reset();
          fail("rendezvous: the store at {}:{} did not complete the authentication handshake in time",
               host, port);
        case auth::Outcome::Closed:
        case auth::Outcome::IoFailed:
          // Closed before its challenge: a store going down or not up yet.
          impl_->fd.reset();
          why = o.detail;
          break;
      }
    }
    if (Clock::now() >= deadline)
      fail("rendezvous: could not connect to the rendezvous store at {}:{} within {} ms: {}", host,
           port, connect_timeout.count(), why);
    // The store may not be up yet (it starts with rank 0 or kolorun): retry,
    // backing off so that many waiting ranks do not flood it.
    std::this_thread::sleep_for(std::min(backoff, std::max(Millis{1}, std::chrono::duration_cast<Millis>(deadline - Clock::now()))));
    backoff = std::min(backoff * 2, Millis{500});
  }
}

StoreClient::~StoreClient() = default;

std::unique_ptr<StoreClient> StoreClient::connect_again(Millis connect_timeout, const auth::Identity& me) const {
  auto c = std::make_unique<StoreClient>(impl_->host, impl_->port, connect_timeout, *impl_->key, me);
  c->impl_->host_rank = impl_->host_rank;
  return c;
}

void StoreClient::set_host(const std::string& who) { impl_->host_rank = who; }

void StoreClient::Impl::lost(const std::string& why) {
  fd.reset();  // the stream is out of step now: no later request may use it
  fail_io("lost connection to the rendezvous store at {}:{} ({}){}", host, port, why,
          host_rank.empty() ? "" : fmt::format("; {} hosts it: did {} crash or get killed?", host_rank, host_rank));
}

void StoreClient::Impl::send_all(const std::string& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd.get(), bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      lost(errno_text(errno));
    }
    off += n;
  }
}

void StoreClient::Impl::recv_exact(char* p, std::size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const auto left = std::chrono::ceil<Millis>(deadline - Clock::now()).count();
    pollfd pfd{fd.get(), POLLIN, 0};
    int rc = left <= 0 ? 0 : ::poll(&pfd, 1, static_cast<int>(std::min<std::int64_t>(left, 1 << 30)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) {
      fd.reset();
      fail_io("rendezvous: the rendezvous store at {}:{} did not answer in time", host, port);
    }
    ssize_t got = ::recv(fd.get(), p, n, 0);
    if (got == 0) lost("closed by the store");
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      lost(errno_text(errno));
    }
    p += got;
    n -= got;
  }
}

proto::Response StoreClient::Impl::call(const proto::Request& req, Millis timeout) {
  std::lock_guard<std::mutex> lock(mu);
  if (!fd.valid()) fail_io("lost connection to the rendezvous store at {}:{} (after an earlier error)", host, port);
  std::string frame;
  try {
    frame = proto::frame(req);
  } catch (const proto::ProtocolError& e) {
    fail("rendezvous: cannot {} key {}: {}", proto::op_name(req.op), req.keys.empty() ? "" : req.keys[0], e.what());
  }
  send_all(frame);
  // Clamped so that a huge timeout cannot overflow the clock.
  const auto deadline = Clock::now() + std::min(timeout, Millis{std::int64_t(1) << 40}) + kReplyGrace;
  char prefix[proto::kPrefixBytes];
  recv_exact(prefix, sizeof prefix, deadline);
  std::string body;
  try {
    body.resize(proto::body_length(prefix));
    recv_exact(body.data(), body.size(), deadline);
    proto::Response r = proto::parse_response(body);
    if (r.status == proto::Status::Error) fail("rendezvous: {}", r.value);
    if (r.status == proto::Status::Timeout)
      fail("rendezvous: timed out after {} ms waiting for {}: {}", timeout.count(),
           r.keys.size() == 1 ? "key" : "keys", join(r.keys));
    return r;
  } catch (const proto::ProtocolError& e) {
    lost(fmt::format("bad reply: {}", e.what()));
  }
}

void StoreClient::set(const std::string& key, const std::string& value) {
  impl_->call({proto::Op::Set, {key}, value, 0}, Millis{0});
}

std::string StoreClient::get(const std::string& key, Millis timeout) {
  return impl_->call({proto::Op::Get, {key}, {}, timeout.count()}, timeout).value;
}

std::int64_t StoreClient::server_clock_ns() {
  return impl_->call({proto::Op::Time, {}, {}, 0}, Millis{0}).number;
}

std::int64_t StoreClient::add(const std::string& key, std::int64_t delta) {
  return impl_->call({proto::Op::Add, {key}, {}, delta}, Millis{0}).number;
}

void StoreClient::wait(const std::vector<std::string>& keys, Millis timeout) {
  static const Millis test_delay{config::test_store_wait_delay_ms()};
  if (test_delay.count() > 0) std::this_thread::sleep_for(test_delay);
  impl_->call({proto::Op::Wait, keys, {}, timeout.count()}, timeout);
}

bool StoreClient::check(const std::vector<std::string>& keys) {
  return impl_->call({proto::Op::Check, keys, {}, 0}, Millis{0}).number != 0;
}

const auth::Key& StoreClient::job_key() const { return *impl_->key; }

std::string StoreClient::local_address() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (!impl_->fd.valid() || ::getsockname(impl_->fd.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    fail_io("lost connection to the rendezvous store at {}:{}", impl_->host, impl_->port);
  return net::address_text(reinterpret_cast<sockaddr*>(&ss), /*with_port=*/false);
}

}  // namespace kolo::rdv
