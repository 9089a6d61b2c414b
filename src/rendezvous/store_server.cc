// The store server: one thread, one poll() loop, every client on it.
//
// A request is answered as soon as it is parsed, except get and wait on keys
// that do not exist yet: those are parked with their deadline (the client
// sends its timeout) and answered when a set or add creates the last missing
// key, or with a Timeout reply naming the keys still missing when the
// deadline passes. While a connection has a parked request the server reads
// nothing more from it, so replies always come back in request order.
//
// A connection that breaks the framing (oversize length prefix, malformed
// body) is closed and logged; the server goes on serving everyone else.
//
// Authentication: a per-job secret is not checked yet. When it is, the
// handshake belongs in accept_all() / on_readable(): a connection starts
// unauthenticated, the server sends its nonce on accept, and on_readable()
// checks the client's answer before handing any byte to take_frame(), so no
// request of an unauthenticated peer is ever parsed.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <limits>
#include <map>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "rendezvous/store.h"
#include "rendezvous/store_protocol.h"
#include "rendezvous/store_socket.h"

namespace kolo::rdv {

namespace {

using Clock = std::chrono::steady_clock;

struct Conn {
  Fd fd;
  std::string peer;     // "ip:port", for the log
  std::string in;       // bytes received and not yet parsed: at most one frame and one read
  std::string out;      // reply bytes the socket has not taken yet
  bool parked = false;  // a get or wait is pending; later requests wait their turn
  bool closed = false;  // dropped; erased at the end of the loop iteration
};

struct Waiter {
  std::uint64_t conn;
  proto::Op op;
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

proto::Response number_reply(std::int64_t n) {
  proto::Response r;
  r.number = n;
  return r;
}

proto::Response error_reply(std::string message) {
  proto::Response r;
  r.status = proto::Status::Error;
  r.value = std::move(message);
  return r;
}

// Timeouts are clamped so that now + timeout cannot overflow the clock.
constexpr std::int64_t kMaxTimeoutMs = std::int64_t(1) << 40;

}  // namespace

struct StoreServer::Impl {
  Fd listener;
  Fd wake;  // eventfd: stop() writes it to get the thread out of poll()
  int port = 0;
  std::atomic<bool> stopping{false};
  std::thread thread;

  std::unordered_map<std::string, std::string> data;
  std::map<std::uint64_t, Conn> conns;
  std::uint64_t next_id = 1;
  std::vector<Waiter> waiters;
  std::vector<std::uint64_t> runnable;  // connections unparked with frames still buffered

  void run();
  void accept_all();
  void on_readable(std::uint64_t id);
  void flush(std::uint64_t id);
  void process(std::uint64_t id);
  void handle(std::uint64_t id, proto::Request& req);
  void reply(std::uint64_t id, const proto::Response& r);
  void close(std::uint64_t id, const std::string& why, LogLevel level);
  bool has_all(const std::vector<std::string>& keys) const;
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  void answer(const Waiter& w);
  void wake_waiters(const std::string& key);
  void expire_waiters(Clock::time_point now);
  int poll_timeout_ms(Clock::time_point now) const;
};

StoreServer::StoreServer(const std::string& bind_host, int port) : impl_(std::make_unique<Impl>()) {
  impl_->listener = listen_tcp(bind_host, port, &impl_->port);
  impl_->wake = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!impl_->wake.valid()) fail("rendezvous: eventfd(): {}", errno_text(errno));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  log(LogLevel::Info, "rendezvous store listening on {}:{}", bind_host, impl_->port);
}

StoreServer::~StoreServer() { stop(); }

int StoreServer::port() const { return impl_->port; }

void StoreServer::stop() {
  if (!impl_->thread.joinable()) return;
  impl_->stopping = true;
  const std::uint64_t one = 1;
  // An eventfd write of 1 cannot fail short of overflowing the counter.
  [[maybe_unused]] ssize_t n = ::write(impl_->wake.get(), &one, sizeof one);
  impl_->thread.join();
  impl_->conns.clear();
  impl_->listener.reset();
}

void StoreServer::Impl::run() {
  std::vector<pollfd> fds;
  std::vector<std::uint64_t> ids;  // ids[i] is the connection of fds[i + 2]
  while (!stopping) {
    fds.assign({{wake.get(), POLLIN, 0}, {listener.get(), POLLIN, 0}});
    ids.clear();
    for (auto& [id, c] : conns) {
      // Backpressure: a client that does not read its replies is not read
      // either. A parked one is only watched for hang-up.
      short ev = !c.out.empty() ? POLLOUT : c.parked ? POLLRDHUP : POLLIN;
      fds.push_back({c.fd.get(), ev, 0});
      ids.push_back(id);
    }
    int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(Clock::now()));
    if (n < 0 && errno != EINTR) {
      log(LogLevel::Error, "rendezvous store: poll(): {}; the store stops", errno_text(errno));
      return;
    }
    if (stopping) return;
    if (n > 0) {
      if (fds[1].revents & POLLIN) accept_all();
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const short rev = fds[i + 2].revents;
        if (rev == 0 || conns.at(ids[i]).closed) continue;
        if (rev & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) {
          if (!(rev & POLLIN) || conns.at(ids[i]).parked) {
            close(ids[i], "peer hung up", LogLevel::Debug);
            continue;
          }
        }
        if (rev & POLLOUT) {
          flush(ids[i]);
          // Replies drained: requests that arrived meanwhile can be served.
          if (conns.at(ids[i]).out.empty()) runnable.push_back(ids[i]);
        }
        if (rev & POLLIN) on_readable(ids[i]);
      }
    }
    expire_waiters(Clock::now());
    while (!runnable.empty()) {
      std::uint64_t id = runnable.back();
      runnable.pop_back();
      process(id);
    }
    std::erase_if(conns, [](const auto& kv) { return kv.second.closed; });
  }
}

int StoreServer::Impl::poll_timeout_ms(Clock::time_point now) const {
  if (waiters.empty()) return -1;
  auto next = std::min_element(waiters.begin(), waiters.end(), [](const Waiter& a, const Waiter& b) {
                return a.deadline < b.deadline;
              })->deadline;
  if (next <= now) return 0;
  // Round up: waking a millisecond early would only loop back into poll.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
  return static_cast<int>(std::min<std::int64_t>(ms, std::numeric_limits<int>::max()));
}

void StoreServer::Impl::accept_all() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // EAGAIN: no more pending. Anything else (EMFILE, a connection reset
      // before accept) concerns one connection, not the server.
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        log(LogLevel::Warn, "rendezvous store: accept(): {}", errno_text(errno));
      return;
    }
    set_nodelay(fd);
    Conn c;
    c.fd = Fd(fd);
    c.peer = address_text(reinterpret_cast<sockaddr*>(&ss), /*with_port=*/true);
    log(LogLevel::Debug, "rendezvous store: connection from {}", c.peer);
    conns.emplace(next_id++, std::move(c));
  }
}

void StoreServer::Impl::on_readable(std::uint64_t id) {
  Conn& c = conns.at(id);
  char buf[64 << 10];
  ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, 0);
  if (n == 0) return close(id, "peer closed the connection", LogLevel::Debug);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    return close(id, errno_text(errno), LogLevel::Debug);
  }
  c.in.append(buf, n);
  process(id);
}

// Handles the complete frames buffered for a connection, until it parks or
// its replies back up.
void StoreServer::Impl::process(std::uint64_t id) {
  std::string body;
  for (;;) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn& c = it->second;
    if (c.closed || c.parked || !c.out.empty()) return;
    proto::Request req;
    try {
      if (!proto::take_frame(c.in, body)) return;
      req = proto::parse_request(body);
    } catch (const proto::ProtocolError& e) {
      return close(id, fmt::format("bad message ({})", e.what()), LogLevel::Warn);
    }
    handle(id, req);
  }
}

void StoreServer::Impl::handle(std::uint64_t id, proto::Request& req) {
  using proto::Op;
  using proto::Status;
  switch (req.op) {
    case Op::Set:
      data[req.keys[0]] = std::move(req.value);
      reply(id, {});
      wake_waiters(req.keys[0]);
      return;
    case Op::Add: {
      std::int64_t cur = 0;
      auto it = data.find(req.keys[0]);
      if (it != data.end()) {
        // Counters are stored as decimal text, so a get of a counter reads naturally.
        std::size_t used = 0;
        bool ok = false;
        try {
          cur = std::stoll(it->second, &used);
          ok = used == it->second.size();
        } catch (const std::exception&) {
        }
        if (!ok)
          return reply(id, error_reply(fmt::format("add: the value of key {} is not an integer", req.keys[0])));
      }
      std::int64_t next;
      if (__builtin_add_overflow(cur, req.number, &next))
        return reply(id, error_reply(fmt::format("add: counter {} overflows", req.keys[0])));
      data[req.keys[0]] = std::to_string(next);
      reply(id, number_reply(next));
      wake_waiters(req.keys[0]);
      return;
    }
    case Op::Check:
      return reply(id, number_reply(has_all(req.keys) ? 1 : 0));
    case Op::Get:
    case Op::Wait: {
      Waiter w{id, req.op, std::move(req.keys),
               Clock::now() + std::chrono::milliseconds(std::clamp<std::int64_t>(req.number, 0, kMaxTimeoutMs))};
      if (has_all(w.keys) || w.deadline <= Clock::now()) return answer(w);
      conns.at(id).parked = true;
      waiters.push_back(std::move(w));
      return;
    }
  }
}

bool StoreServer::Impl::has_all(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data.count(k) > 0; });
}

std::vector<std::string> StoreServer::Impl::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> m;
  for (const auto& k : keys)
    if (!data.count(k)) m.push_back(k);
  return m;
}

// Replies to a get or wait: the value, or Timeout with the missing keys.
void StoreServer::Impl::answer(const Waiter& w) {
  proto::Response r;
  if (!has_all(w.keys)) {
    r.status = proto::Status::Timeout;
    r.keys = missing(w.keys);
  } else if (w.op == proto::Op::Get) {
    r.value = data.at(w.keys[0]);
  }
  reply(w.conn, r);
}

void StoreServer::Impl::wake_waiters(const std::string& key) {
  for (std::size_t i = 0; i < waiters.size();) {
    Waiter& w = waiters[i];
    if (std::find(w.keys.begin(), w.keys.end(), key) != w.keys.end() && has_all(w.keys)) {
      Waiter done = std::move(w);
      waiters.erase(waiters.begin() + i);
      conns.at(done.conn).parked = false;
      answer(done);
      runnable.push_back(done.conn);
    } else {
      ++i;
    }
  }
}

void StoreServer::Impl::expire_waiters(Clock::time_point now) {
  for (std::size_t i = 0; i < waiters.size();) {
    if (waiters[i].deadline <= now) {
      Waiter done = std::move(waiters[i]);
      waiters.erase(waiters.begin() + i);
      conns.at(done.conn).parked = false;
      answer(done);
      runnable.push_back(done.conn);
    } else {
      ++i;
    }
  }
}

void StoreServer::Impl::reply(std::uint64_t id, const proto::Response& r) {
  Conn& c = conns.at(id);
  if (c.closed) return;
  c.out += proto::frame(r);
  flush(id);
}

// Sends what the socket takes now; the rest goes out on POLLOUT.
void StoreServer::Impl::flush(std::uint64_t id) {
  Conn& c = conns.at(id);
  while (!c.out.empty() && !c.closed) {
    ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      return close(id, errno_text(errno), LogLevel::Debug);
    }
    c.out.erase(0, n);
  }
}

void StoreServer::Impl::close(std::uint64_t id, const std::string& why, LogLevel level) {
  Conn& c = conns.at(id);
  if (c.closed) return;
  log(level, "rendezvous store: closing connection from {}: {}", c.peer, why);
  c.closed = true;
  c.fd.reset();
  std::erase_if(waiters, [id](const Waiter& w) { return w.conn == id; });
}

}  // namespace kolo::rdv
