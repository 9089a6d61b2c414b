// The store server: one thread, one poll() loop, every client on it.
//
// A request is answered as soon as it is parsed, except get and wait on keys
// that do not exist yet: those park the connection with their deadline (the
// client sends its timeout) and are answered when a set or add creates the
// last missing key, or with a Timeout reply naming the keys still missing
// when the deadline passes. While a connection is parked the server reads
// nothing more from it, so replies always come back in request order, and a
// connection has at most one parked request.
//
// Scale: in a job's rendezvous every rank sets one key and waits for all of
// them. Parked requests are indexed by the keys they still miss and by
// deadline, so that pattern costs O(keys) in all rather than a scan of every
// waiter on every set (which is cubic in the number of ranks).
//
// A connection that breaks the framing (oversize length prefix, malformed
// body) is closed and logged; the server goes on serving everyone else.
//
// Authentication (auth.h): on accept the server sends its challenge, and
// until the connection's answer has been checked the server reads at most the
// answer's fixed kAnswerBytes from it and nothing is parsed as a frame, so
// a length prefix is never even looked at before the peer has proved it
// holds the job's key. A wrong answer, bytes that cannot begin one, or no
// answer within auth::kAnswerTimeout close the connection with a warning
// naming the peer; everyone else is served on.
//
// Retired (a store a rank hosted for a communicator that is gone, see
// hosted_store.h): the loop serves on as before and, after each pass, lists
// who still holds a connection besides the host rank itself; when nobody
// does, it closes what is left and ends. That list and the end are the only
// state shared with other threads (retire_mu).
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "rendezvous/store.h"
#include "rendezvous/store_protocol.h"
#include "net/address.h"
#include "net/socket.h"

namespace kolo::rdv {

using net::Fd;

namespace {

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

// Out of file descriptors, accept() fails while the listener stays readable:
// pausing accepts keeps the loop from spinning until a connection closes.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

}  // namespace

struct StoreServer::Impl {
  // Nested, not in the anonymous namespace: a class outside it must not hold
  // members of anonymous types (-Wsubobject-linkage in unity builds).
  using Clock = std::chrono::steady_clock;
  using ConnId = std::uint64_t;

  // A get or wait that waits for keys to appear.
  struct Parked {
    proto::Op op;
    std::vector<std::string> keys;
    std::size_t missing;  // distinct keys of `keys` not in the store yet
    Clock::time_point deadline;
  };

  struct Conn {
    Fd fd;
    std::string peer;  // "ip:port", for the log
    bool authed = false;
    auth::Challenge challenge{};  // sent on accept; the answer must match it
    auth::Identity who;           // what the peer claimed, once authenticated
    // Before authentication: the answer's bytes so far (at most kAnswerBytes).
    // After: bytes received and not yet parsed, at most one frame and one read.
    std::string in;
    std::string out;   // reply bytes the socket has not taken yet
    std::optional<Parked> parked;
    bool closed = false;  // dropped; erased at the end of the loop iteration
  };

  std::optional<auth::Key> key;  // none: the transitional open store
  Fd listener;
  Fd wake;  // eventfd: stop() and retire() write it to get the thread out of poll()
  int port = 0;
  std::atomic<bool> stopping{false};
  std::thread thread;
  const pid_t owner = ::getpid();  // a forked copy has no thread

  // Retirement: host_rank is written before `retired` is set.
  int host_rank = -1;
  std::atomic<bool> retired{false};
  bool told_holders = false;  // the loop logged who it serves on for
  std::mutex retire_mu;
  std::condition_variable retire_cv;
  bool ended = false;    // the loop has returned (retire_mu)
  std::string holders;   // who still held a connection after the last pass (retire_mu)

  std::unordered_map<std::string, std::string> data;
  std::map<ConnId, Conn> conns;
  ConnId next_id = 1;
  // Parked connections by each key they still miss, and by deadline.
  std::unordered_map<std::string, std::vector<ConnId>> waiting_for;
  std::set<std::pair<Clock::time_point, ConnId>> deadlines;
  std::vector<ConnId> runnable;  // unparked or drained, with requests still buffered
  // Connections still to authenticate, by deadline (a FIFO: the timeout is fixed).
  std::deque<std::pair<Clock::time_point, ConnId>> auth_deadlines;
  Clock::time_point accept_paused_until{};

  void run();
  void loop();
  int poll_timeout_ms(Clock::time_point now) const;
  void accept_all();
  void on_readable(ConnId id);
  void on_handshake_bytes(ConnId id);
  void reject(ConnId id, const std::string& why);
  void expire_handshakes(Clock::time_point now);
  void flush(ConnId id);
  void process(ConnId id);
  void handle(ConnId id, proto::Request& req);
  void reply(ConnId id, const proto::Response& r);
  void close(ConnId id, const std::string& why, LogLevel level);
  void store(const std::string& key, std::string value);
  void park(ConnId id, Parked p, const std::vector<std::string>& missing);
  void unpark(ConnId id);
  void answer(ConnId id, const Parked& p);
  void expire(Clock::time_point now);
  bool done_when_retired();
  void end();
};

StoreServer::StoreServer(const std::string& bind_host, int port, const auth::Key& key)
    : impl_(std::make_unique<Impl>()) {
  start(bind_host, port, &key);
}

StoreServer::StoreServer(const std::string& bind_host, int port) : impl_(std::make_unique<Impl>()) {
  start(bind_host, port, nullptr);
}

void StoreServer::start(const std::string& bind_host, int port, const auth::Key* key) {
  if (key) impl_->key = *key;
  net::Listener l = net::listen_tcp(bind_host, port, SOCK_NONBLOCK, "rendezvous");
  impl_->listener = std::move(l.fd);
  impl_->port = l.port;
  impl_->wake = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!impl_->wake.valid()) fail("rendezvous: eventfd(): {}", errno_text(errno));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  log(LogLevel::Info, "rendezvous store listening on {}:{}", bind_host, impl_->port);
  if (!key)
    log(LogLevel::Info, "rendezvous store on {}:{} was started without the job's key: it lets any "
        "client in", bind_host, impl_->port);
}

StoreServer::~StoreServer() {
  // A forked child's copy: its thread is the parent's, and its sockets (shared
  // with the parent) close when the child ends.
  if (forked_copy()) {
    (void)impl_.release();
    return;
  }
  stop();
}

bool StoreServer::forked_copy() const { return impl_->owner != ::getpid(); }

void StoreServer::retire(int host_rank) {
  if (!impl_->thread.joinable() || impl_->retired) return;
  impl_->host_rank = host_rank;
  impl_->retired = true;
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wake.get(), &one, sizeof one);
}

bool StoreServer::wait_retired(std::chrono::steady_clock::time_point deadline, std::string* holders) {
  std::unique_lock lk(impl_->retire_mu);
  if (impl_->retire_cv.wait_until(lk, deadline, [&] { return impl_->ended; })) return true;
  if (holders) *holders = impl_->holders;
  return false;
}

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

void StoreServer::Impl::end() {
  std::lock_guard lk(retire_mu);
  ended = true;
  retire_cv.notify_all();
}

// After a pass of a retired store's loop: true when only the host rank's own
// connections are left (closed then); otherwise publishes who holds one.
bool StoreServer::Impl::done_when_retired() {
  std::set<int> ranks;
  std::vector<std::string> others;
  for (auto& [id, c] : conns) {
    if (c.closed) continue;
    if (!c.authed) others.push_back(fmt::format("a client at {} (authenticating)", c.peer));
    else if (c.who.rank < 0) others.push_back(fmt::format("a client at {}", c.peer));
    else if (c.who.rank != host_rank) ranks.insert(c.who.rank);
  }
  if (ranks.empty() && others.empty()) {
    log(LogLevel::Debug, "rendezvous: no other rank holds the store on port {} any more: it stops", port);
    conns.clear();
    return true;
  }
  std::string text;
  if (!ranks.empty()) text = ranks.size() == 1 ? "rank " : "ranks ";
  for (int r : ranks) text += fmt::format("{}{}", r == *ranks.begin() ? "" : ", ", r);
  for (const auto& o : others) text += (text.empty() ? "" : ", ") + o;
  if (!told_holders) {
    told_holders = true;
    log(LogLevel::Info, "rendezvous: this rank is done with the store it hosts on port {}; it keeps serving "
        "the store until {} {} done with it", port, text, ranks.size() + others.size() == 1 ? "is" : "are");
  }
  std::lock_guard lk(retire_mu);
  holders = std::move(text);
  return false;
}

void StoreServer::Impl::run() {
  loop();
  end();
}

void StoreServer::Impl::loop() {
  std::vector<pollfd> fds;
  std::vector<ConnId> ids;  // ids[i] is the connection of fds[i + 2]
  while (!stopping) {
    const auto now = Clock::now();
    const short accept_events = now >= accept_paused_until ? POLLIN : 0;
    fds.assign({{wake.get(), POLLIN, 0}, {listener.get(), accept_events, 0}});
    ids.clear();
    for (auto& [id, c] : conns) {
      // Backpressure: a client that does not read its replies is not read
      // either. A parked one is only watched for hang-up.
      short ev = !c.out.empty() ? POLLOUT : c.parked ? POLLRDHUP : POLLIN;
      fds.push_back({c.fd.get(), ev, 0});
      ids.push_back(id);
    }
    int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(now));
    if (n < 0 && errno != EINTR) {
      log(LogLevel::Error, "rendezvous store: poll(): {}; the store stops", errno_text(errno));
      return;
    }
    if (stopping) return;
    if (fds[0].revents & POLLIN) {
      std::uint64_t woken;  // retire(): reset the eventfd, then check below
      [[maybe_unused]] ssize_t got = ::read(wake.get(), &woken, sizeof woken);
    }
    if (n > 0) {
      if (fds[1].revents & POLLIN) accept_all();
      for (std::size_t i = 0; i < ids.size(); ++i) {
        const short rev = fds[i + 2].revents;
        const ConnId id = ids[i];
        if (rev == 0 || conns.at(id).closed) continue;
        if ((rev & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) && (!(rev & POLLIN) || conns.at(id).parked)) {
          if (!conns.at(id).authed) reject(id, "hung up before authenticating");
          else close(id, "peer hung up", LogLevel::Debug);
          continue;
        }
        if (rev & POLLOUT) {
          flush(id);
          // Replies drained: requests that arrived meanwhile can be served.
          if (conns.at(id).out.empty()) runnable.push_back(id);
        }
        if (rev & POLLIN) on_readable(id);
      }
    }
    expire(Clock::now());
    expire_handshakes(Clock::now());
    while (!runnable.empty()) {
      const ConnId id = runnable.back();
      runnable.pop_back();
      process(id);
    }
    std::erase_if(conns, [](const auto& kv) { return kv.second.closed; });
    if (retired && done_when_retired()) return;
  }
}

int StoreServer::Impl::poll_timeout_ms(Clock::time_point now) const {
  std::optional<Clock::time_point> next;
  if (!deadlines.empty()) next = deadlines.begin()->first;
  if (!auth_deadlines.empty())
    next = std::min(next.value_or(auth_deadlines.front().first), auth_deadlines.front().first);
  if (accept_paused_until > now) next = std::min(next.value_or(accept_paused_until), accept_paused_until);
  if (!next) return -1;
  if (*next <= now) return 0;
  // Round up: waking a millisecond early would only loop back into poll.
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(*next - now).count();
  return static_cast<int>(std::min<std::int64_t>(ms, std::numeric_limits<int>::max()));
}

void StoreServer::Impl::accept_all() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        log(LogLevel::Warn, "rendezvous store: out of file descriptors with {} connections; "
            "raise the limit (ulimit -n) for jobs of this size", conns.size());
        accept_paused_until = Clock::now() + kAcceptPause;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
        log(LogLevel::Warn, "rendezvous store: accept(): {}", errno_text(errno));
      }
      return;
    }
    net::set_nodelay(fd);
    // A peer behind a link that went down sends no FIN: without probes its
    // connection would look open for ever, and a retired store would wait
    // out all of KOLO_STORE_LINGER_MS for it at exit.
    net::set_keepalive(fd);
    Conn c;
    c.fd = Fd(fd);
    c.peer = net::address_text(reinterpret_cast<sockaddr*>(&ss), /*with_port=*/true);
    log(LogLevel::Debug, "rendezvous store: connection from {}", c.peer);
    c.challenge = auth::make_challenge(auth::Channel::Store, -1, /*open=*/!key);
    c.out.assign(reinterpret_cast<const char*>(c.challenge.data()), c.challenge.size());
    const ConnId id = next_id++;
    conns.emplace(id, std::move(c));
    auth_deadlines.emplace_back(Clock::now() + auth::kAnswerTimeout, id);
    flush(id);  // a fresh socket takes the 48 bytes at once
  }
}

void StoreServer::Impl::on_readable(ConnId id) {
  Conn& c = conns.at(id);
  if (!c.authed) return on_handshake_bytes(id);
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

// Reads the answer to the challenge, never a byte past it: the peer's
// requests stay in the socket until it is authenticated.
void StoreServer::Impl::on_handshake_bytes(ConnId id) {
  Conn& c = conns.at(id);
  char buf[auth::kAnswerBytes];
  const std::size_t want = auth::kAnswerBytes - c.in.size();
  ssize_t n = ::recv(c.fd.get(), buf, want, 0);
  if (n == 0)
    return reject(id, fmt::format("closed the connection before authenticating ({} of {} handshake bytes)",
                                  c.in.size(), auth::kAnswerBytes));
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    return reject(id, fmt::format("{} before authenticating", errno_text(errno)));
  }
  c.in.append(buf, n);
  const auto* bytes = reinterpret_cast<const unsigned char*>(c.in.data());
  if (!auth::answer_prefix_ok(bytes, c.in.size())) return reject(id, "not a kolo handshake");
  if (c.in.size() < auth::kAnswerBytes) return;
  std::string why;
  const auto who = auth::check_answer(key ? &*key : nullptr, c.challenge, bytes, c.in.size(), &why);
  if (!who) return reject(id, why);
  auth::Answer answer;
  std::copy(bytes, bytes + answer.size(), answer.begin());
  c.authed = true;
  c.who = *who;
  c.in.clear();
  log(LogLevel::Debug, "rendezvous store: {} authenticated from {}",
      who->rank >= 0 ? fmt::format("rank {}", who->rank) : std::string("a client"), c.peer);
  const auth::Verdict v = auth::make_verdict(key ? &*key : nullptr, c.challenge, answer, true);
  c.out.append(reinterpret_cast<const char*>(v.data()), v.size());
  flush(id);
}

// Refuses a connection that has not proved it holds the key: tells it so
// (best effort, so that a rank of another job gets a clear error rather than
// a reset) and closes it.
void StoreServer::Impl::reject(ConnId id, const std::string& why) {
  Conn& c = conns.at(id);
  if (c.closed) return;
  log(LogLevel::Warn, "rendezvous store: rejected a connection from {}: {}", c.peer, why);
  const auth::Verdict v = auth::make_verdict(nullptr, c.challenge, auth::Answer{}, false);
  [[maybe_unused]] ssize_t n = ::send(c.fd.get(), v.data(), v.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close(id, "rejected", LogLevel::Debug);
}

void StoreServer::Impl::expire_handshakes(Clock::time_point now) {
  while (!auth_deadlines.empty() && auth_deadlines.front().first <= now) {
    const ConnId id = auth_deadlines.front().second;
    auth_deadlines.pop_front();
    auto it = conns.find(id);
    if (it != conns.end() && !it->second.authed && !it->second.closed)
      reject(id, fmt::format("no credentials within {} ms", auth::kAnswerTimeout.count()));
  }
}

// Handles the complete frames buffered for a connection, until it parks or
// its replies back up.
void StoreServer::Impl::process(ConnId id) {
  std::string body;
  for (;;) {
    auto it = conns.find(id);
    if (it == conns.end()) return;
    Conn& c = it->second;
    if (c.closed || !c.authed || c.parked || !c.out.empty()) return;
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

void StoreServer::Impl::handle(ConnId id, proto::Request& req) {
  using proto::Op;
  switch (req.op) {
    case Op::Set:
      reply(id, {});
      return store(req.keys[0], std::move(req.value));
    case Op::Add: {
      const std::string& key = req.keys[0];
      std::int64_t cur = 0;
      if (auto it = data.find(key); it != data.end()) {
        // Counters are stored as decimal text, so a get of a counter reads naturally.
        std::size_t used = 0;
        bool ok = false;
        try {
          cur = std::stoll(it->second, &used);
          ok = used == it->second.size();
        } catch (const std::exception&) {
        }
        if (!ok) return reply(id, error_reply(fmt::format("add: the value of key {} is not an integer", key)));
      }
      std::int64_t next;
      if (__builtin_add_overflow(cur, req.number, &next))
        return reply(id, error_reply(fmt::format("add: counter {} overflows", key)));
      reply(id, number_reply(next));
      return store(key, std::to_string(next));
    }
    case Op::Time:
      return reply(id, number_reply(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch()).count()));
    case Op::Check:
      return reply(id, number_reply(std::all_of(req.keys.begin(), req.keys.end(),
                                                [&](const std::string& k) { return data.count(k) > 0; })));
    case Op::Get:
    case Op::Wait: {
      std::vector<std::string> missing = req.keys;
      std::sort(missing.begin(), missing.end());
      missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
      std::erase_if(missing, [&](const std::string& k) { return data.count(k) > 0; });
      Parked p{req.op, std::move(req.keys), missing.size(),
               Clock::now() + std::chrono::milliseconds(std::clamp<std::int64_t>(req.number, 0, kMaxTimeoutMs))};
      if (missing.empty() || p.deadline <= Clock::now()) return answer(id, p);
      return park(id, std::move(p), missing);
    }
  }
}

// Stores a value and answers the requests that waited for this key last.
void StoreServer::Impl::store(const std::string& key, std::string value) {
  const bool created = data.insert_or_assign(key, std::move(value)).second;
  if (!created) return;
  auto it = waiting_for.find(key);
  if (it == waiting_for.end()) return;
  const std::vector<ConnId> ids = std::move(it->second);
  waiting_for.erase(it);
  for (ConnId id : ids) {
    Conn& c = conns.at(id);
    if (--c.parked->missing == 0) unpark(id);
  }
}

// missing: the distinct keys of p that are not in the store yet.
void StoreServer::Impl::park(ConnId id, Parked p, const std::vector<std::string>& missing) {
  for (const auto& k : missing) waiting_for[k].push_back(id);
  deadlines.emplace(p.deadline, id);
  conns.at(id).parked = std::move(p);
}

// Takes a parked request out of the indexes and answers it.
void StoreServer::Impl::unpark(ConnId id) {
  Conn& c = conns.at(id);
  Parked p = std::move(*c.parked);
  c.parked.reset();
  deadlines.erase({p.deadline, id});
  for (const auto& k : p.keys) {
    auto it = waiting_for.find(k);
    if (it == waiting_for.end()) continue;
    std::erase(it->second, id);
    if (it->second.empty()) waiting_for.erase(it);
  }
  answer(id, p);
  runnable.push_back(id);
}

// Replies to a get or wait: the value, or Timeout with the keys still missing.
void StoreServer::Impl::answer(ConnId id, const Parked& p) {
  proto::Response r;
  for (const auto& k : p.keys)
    if (!data.count(k)) r.keys.push_back(k);
  if (!r.keys.empty()) r.status = proto::Status::Timeout;
  else if (p.op == proto::Op::Get) r.value = data.at(p.keys[0]);
  reply(id, r);
}

void StoreServer::Impl::expire(Clock::time_point now) {
  while (!deadlines.empty() && deadlines.begin()->first <= now) unpark(deadlines.begin()->second);
}

void StoreServer::Impl::reply(ConnId id, const proto::Response& r) {
  Conn& c = conns.at(id);
  if (c.closed) return;
  c.out += proto::frame(r);
  flush(id);
}

// Sends what the socket takes now; the rest goes out on POLLOUT.
void StoreServer::Impl::flush(ConnId id) {
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

void StoreServer::Impl::close(ConnId id, const std::string& why, LogLevel level) {
  Conn& c = conns.at(id);
  if (c.closed) return;
  log(level, "rendezvous store: closing connection from {}: {}", c.peer, why);
  c.closed = true;
  c.fd.reset();
  if (c.parked) {
    // Answering a closed connection is a no-op: unpark just drops the indexes.
    unpark(id);
  }
}

}  // namespace kolo::rdv
