#include "transport/tcp_mesh.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "net/auth.h"
#include "net/address.h"

namespace kolo::transport {

namespace {

std::pair<std::string, int> split_addr(const std::string& addr) {
  auto colon = addr.rfind(':');
  return {addr.substr(0, colon), std::stoi(addr.substr(colon + 1))};
}

}  // namespace

// Building the mesh. Lower ranks accept, higher ranks connect: each pair gets
// one connection. Every connection starts with the handshake of
// net/auth.h, keyed by the job's key the store client authenticated
// with: the acceptor challenges, the connector answers with its rank, the
// job's size and the rank it means to reach under a MAC, and the acceptor
// proves the key back. That answer (fixed size) is all an acceptor reads
// from a connection before it is authenticated.
//
// The acceptor serves its handshakes side by side in one poll loop, so that
// a connection that sends garbage, a wrong MAC or nothing at all (a port
// scanner, a rank of another job) is rejected and logged while the ranks it
// waits for go on connecting; an intruder never takes a rank's slot.
TcpMesh::TcpMesh(rdv::StoreClient& store, const std::string& prefix, int rank, int size,
                 const std::string& address, Members members)
    : rank_(rank), size_(size), members_(std::move(members)), hdr_sent_(size, kHeader), hdr_recvd_(size, kHeader),
      hdr_in_(size), peers_(size),
      timeout_(std::chrono::milliseconds(config::timeout_ms() > 0 ? config::timeout_ms()
                                                                   : std::int64_t{1} << 40)),
      stall_warn_(std::chrono::milliseconds(config::stall_warn_ms())),
      liveness_(size, static_cast<long>(config::peer_timeout_ms())) {
  listener_ = net::listen_tcp("0.0.0.0", 0, 0, "data connections");
  const std::string me = fmt::format("{}:{}", address, listener_.port);
  log(LogLevel::Debug, "data connections: listening on {}", me);
  store.set(fmt::format("{}/addr/{}", prefix, rank), me);
  const auto rdv_timeout = std::chrono::milliseconds(config::rendezvous_timeout_ms());
  const auto deadline = Clock::now() + rdv_timeout;
  const auth::Key& key = store.job_key();

  for (int peer = 0; peer < rank; ++peer) {
    auto [host, port] = split_addr(store.get(fmt::format("{}/addr/{}", prefix, peer), rdv_timeout));
    const std::string who = members_.name(peer);
    net::Fd fd = net::connect_until(host, port, deadline, fmt::format("{}, at the address it advertised,", who));
    // The peer answers once it is done connecting to the ranks below it: the
    // handshake may take until the rendezvous deadline.
    const auth::Outcome o = auth::connect_handshake(fd.get(), key, auth::Channel::Data, {rank, size, peer}, deadline);
    switch (o.status) {
      case auth::Outcome::Accepted:
        break;
      case auth::Outcome::Rejected:
        fail("{} at {}:{} rejected this rank's credentials (different job or KOLO_SECRET?)", who, host, port);
      case auth::Outcome::Forged:
        fail("the data address {}:{} of {} answered without the job's secret ({}): is a process "
             "of another job listening there?", host, port, who, o.detail);
      case auth::Outcome::NotKolo:
      case auth::Outcome::WrongPeer:
        fail("the data address {}:{} of {} is not that rank of this job ({}); if that address exists on "
             "several hosts (a local bridge such as docker0), choose the network with KOLO_IFACE",
             host, port, who, o.detail);
      case auth::Outcome::TimedOut:
        fail("timed out waiting for {} at {}:{} to authenticate within {} ms", who, host, port,
             rdv_timeout.count());
      case auth::Outcome::Closed:
      case auth::Outcome::IoFailed:
        fail_io("{} at {}:{} dropped the connection during the handshake ({}); did it exit?", who,
                host, port, o.detail);
    }
    peers_[peer] = std::move(fd);
  }
  accept_peers(key, deadline, me);
  const int buf = static_cast<int>(config::tcp_buffer_bytes());
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    net::tune_data_socket(peers_[p].get(), buf);
    net::set_nonblocking(peers_[p].get(), true);
  }
}

namespace {

// A connection whose answer the acceptor still waits for.
struct Pending {
  net::Fd fd;
  std::string from;  // "ip:port"
  auth::Challenge challenge{};
  auth::Answer answer{};
  std::size_t got = 0;
  Clock::time_point until;
};

void reject(Pending& p, const std::string& why) {
  log(LogLevel::Warn, "rejected a data connection from {}: {}", p.from, why);
  const auth::Verdict v = auth::make_verdict(nullptr, p.challenge, p.answer, false);
  [[maybe_unused]] ssize_t n = ::send(p.fd.get(), v.data(), v.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  p.fd.reset();
}

}  // namespace

void TcpMesh::accept_peers(const auth::Key& key, Clock::time_point deadline, const std::string& me) {
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  net::set_nonblocking(listener_.fd.get(), true);
  auto missing = [&] {
    std::string s;
    for (int r = rank_ + 1; r < size_; ++r)
      if (!peers_[r])
        s += (s.empty() ? "" : ", ") + std::to_string(members_.global(r)) +
             (members_.hosts.empty() ? "" : " (host " + members_.hosts[r] + ")");
    return s;
  };
  for (;;) {
    if (missing().empty()) break;
    const auto now = Clock::now();
    std::erase_if(pending, [](const Pending& p) { return !p.fd; });
    for (auto& p : pending)
      if (p.until <= now) reject(p, fmt::format("no credentials within {} ms", auth::kAnswerTimeout.count()));
    std::erase_if(pending, [](const Pending& p) { return !p.fd; });
    if (now >= deadline)
      fail("timed out waiting for rank(s) {} to connect to the address this rank advertised, {}: is it reachable "
           "from their hosts? (KOLO_IFACE chooses the network)", missing(), me);
    auto wake = deadline;
    fds.assign({{listener_.fd.get(), POLLIN, 0}});
    for (auto& p : pending) {
      fds.push_back({p.fd.get(), POLLIN, 0});
      wake = std::min(wake, p.until);
    }
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<long long>(ms, 0, 1000)));
    if (rc < 0 && errno != EINTR) fail("poll(): {}", errno_text(errno));
    if (rc <= 0) continue;

    for (std::size_t i = 0; i < pending.size(); ++i) {
      if (fds[i + 1].revents == 0) continue;
      Pending& p = pending[i];
      const ssize_t n = ::recv(p.fd.get(), p.answer.data() + p.got, p.answer.size() - p.got, 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n <= 0) {
        reject(p, n == 0 ? fmt::format("closed the connection before authenticating ({} of {} handshake bytes)",
                                       p.got, auth::kAnswerBytes)
                         : errno_text(errno));
        continue;
      }
      p.got += static_cast<std::size_t>(n);
      if (!auth::answer_prefix_ok(p.answer.data(), p.got)) {
        reject(p, "not a kolo handshake");
        continue;
      }
      if (p.got < p.answer.size()) continue;
      std::string why;
      const auto who = auth::check_answer(&key, p.challenge, p.answer.data(), p.got, &why);
      if (!who) {
        reject(p, why);
        continue;
      }
      // The MAC is right, so this is a process of this job; check that it is
      // one this rank waits for (a rank started twice, a mixed-up size).
      if (who->size != size_ || who->peer != rank_ || who->rank <= rank_ || who->rank >= size_) {
        // (Numbers within this mesh: a sub-group's members are not the job's ranks.)
        reject(p, fmt::format("this job's credentials, but rank {} of {} for rank {}: this rank of {} "
                              "waits for ranks {}", who->rank, who->size, who->peer, size_, missing()));
        continue;
      }
      if (peers_[who->rank]) {
        reject(p, fmt::format("{} is already connected", members_.name(who->rank)));
        continue;
      }
      const auth::Verdict v = auth::make_verdict(&key, p.challenge, p.answer, true);
      net::write_all(p.fd.get(), v.data(), v.size(), members_.name(who->rank));
      log(LogLevel::Debug, "data connections: {} connected from {}", members_.name(who->rank), p.from);
      peers_[who->rank] = std::move(p.fd);
    }

    if (fds[0].revents & POLLIN) {
      for (;;) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        const int fd = ::accept4(listener_.fd.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR) break;
          fail("accept(): {}", errno_text(errno));
        }
        Pending p;
        p.fd = net::Fd(fd);
        p.from = net::address_text(reinterpret_cast<sockaddr*>(&ss), /*with_port=*/true);
        p.challenge = auth::make_challenge(auth::Channel::Data, rank_);
        p.until = Clock::now() + auth::kAnswerTimeout;
        // A fresh socket's buffer takes the 48 bytes at once.
        if (::send(fd, p.challenge.data(), p.challenge.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            static_cast<ssize_t>(p.challenge.size())) {
          log(LogLevel::Warn, "dropped a data connection from {}: cannot send the handshake ({})", p.from,
              errno_text(errno));
          continue;
        }
        pending.push_back(std::move(p));
      }
    }
  }
  for (auto& p : pending)
    if (p.fd) log(LogLevel::Warn, "closing a data connection from {} that never authenticated", p.from);
  // Every peer is here: later connections are refused rather than left
  // unanswered in the backlog.
  listener_.fd.reset();
}

void TcpMesh::begin(const Fingerprint& fp) {
  previous_ = current_;
  current_ = fp;
  std::fill(hdr_sent_.begin(), hdr_sent_.end(), 0);
  std::fill(hdr_recvd_.begin(), hdr_recvd_.end(), 0);
}

void TcpMesh::abort() {
  for (auto& fd : peers_)
    if (fd) ::shutdown(fd.get(), SHUT_RDWR);
}

void TcpMesh::check_peers(const char* what) {
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    char byte;
    const ssize_t n = ::recv(peers_[q].get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) fail_read(q, n, what);
  }
}

std::size_t TcpMesh::send_some(int peer, const char* data, std::size_t len) {
  std::size_t& hdr = hdr_sent_[peer];
  iovec iov[2] = {{reinterpret_cast<char*>(&current_) + hdr, kHeader - hdr},
                  {const_cast<char*>(data), len}};
  msghdr msg{};
  msg.msg_iov = hdr < kHeader ? iov : iov + 1;
  msg.msg_iovlen = hdr < kHeader ? 2 : 1;
  for (;;) {
    ssize_t n = ::sendmsg(peers_[peer].get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      const std::size_t h = std::min(static_cast<std::size_t>(n), kHeader - hdr);
      hdr += h;
      return static_cast<std::size_t>(n) - h;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    fail_io("lost connection to {} while sending: {}", members_.name(peer), errno_text(errno));
  }
}

std::size_t TcpMesh::recv_some(int peer, char* data, std::size_t len, const char* what) {
  std::size_t& hdr = hdr_recvd_[peer];
  iovec iov[2] = {{reinterpret_cast<char*>(&hdr_in_[peer]) + hdr, kHeader - hdr}, {data, len}};
  const bool want_header = hdr < kHeader;
  for (;;) {
    ssize_t n = ::readv(peers_[peer].get(), want_header ? iov : iov + 1, want_header ? 2 : 1);
    if (n > 0) {
      const std::size_t h = std::min(static_cast<std::size_t>(n), kHeader - hdr);
      hdr += h;
      // Check the peer's call before anything it sent is used.
      if (want_header && hdr == kHeader && !(hdr_in_[peer] == current_))
        fail_mismatch(current_, previous_, members_.label(rank_), hdr_in_[peer], members_.label(peer));
      return static_cast<std::size_t>(n) - h;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    fail_read(peer, n, what);
  }
}

void TcpMesh::fail_read(int peer, ssize_t n, const char* what) const {
  if (n == 0) fail_io("{}: {} closed its connection (did it exit?)", what, members_.name(peer));
  fail_io("{}: lost connection to {}: {}", what, members_.name(peer), errno_text(errno));
}

bool TcpMesh::try_io(std::span<SendOp> sends, std::span<RecvOp> recvs, bool& moved,
                     const char* what) {
  for (auto& s : sends) {
    while (s.done < s.avail || hdr_sent_[s.peer] < kHeader) {
      const std::size_t hdr_before = hdr_sent_[s.peer];
      const std::size_t n = send_some(s.peer, s.data + s.done, s.avail - s.done);
      if (n == 0 && hdr_sent_[s.peer] == hdr_before) break;  // would block
      s.done += n;
      moved = true;
    }
  }
  bool received = false;
  for (auto& r : recvs) {
    while (r.done < r.len || hdr_recvd_[r.peer] < kHeader) {
      const std::size_t hdr_before = hdr_recvd_[r.peer];
      const std::size_t n = recv_some(r.peer, r.data + r.done, r.len - r.done, what);
      if (n == 0 && hdr_recvd_[r.peer] == hdr_before) break;  // would block
      r.done += n;
      received = moved = true;
    }
  }
  return received;
}

void TcpMesh::warn_stall(std::span<SendOp> sends, std::span<RecvOp> recvs, const char* what) {
  std::string waiting;
  for (auto& r : recvs)
    if (r.done < r.len || hdr_recvd_[r.peer] < kHeader)
      waiting += fmt::format(" {} ({} of {} bytes received)", members_.name(r.peer), r.done, r.len);
  for (auto& s : sends)
    if (s.done < s.avail) waiting += fmt::format(" {} (not taking data)", members_.name(s.peer));
  log(LogLevel::Warn, "stall: collective #{} {} ({}) has made no progress for {} ms; waiting for{}",
      current_.seq, current_.call(), what, stall_warn_.count(), waiting);
}

void TcpMesh::check_alive(std::span<SendOp> sends, std::span<RecvOp> recvs, const char* what) {
  const auto now = Clock::now();
  auto check = [&](int peer) {
    const long ms = liveness_.silent_ms(peer, peers_[peer].get(), now);
    if (ms >= 0)
      fail_io("{}: lost connection to {}: its host has acknowledged nothing for {} ms "
              "(KOLO_PEER_TIMEOUT_MS={})", what, members_.name(peer), ms, liveness_.peer_ms());
  };
  for (auto& s : sends)
    if (s.done < s.avail || hdr_sent_[s.peer] < kHeader) check(s.peer);
  for (auto& r : recvs)
    if (r.done < r.len || hdr_recvd_[r.peer] < kHeader) check(r.peer);
}

void TcpMesh::wait_io(std::span<SendOp> sends, std::span<RecvOp> recvs,
                      Clock::time_point deadline, const char* what) {
  pollfds_.clear();
  for (auto& s : sends)
    if (s.done < s.avail || hdr_sent_[s.peer] < kHeader)
      pollfds_.push_back({peers_[s.peer].get(), POLLOUT, 0});
  for (auto& r : recvs)
    if (r.done < r.len || hdr_recvd_[r.peer] < kHeader)
      pollfds_.push_back({peers_[r.peer].get(), POLLIN, 0});
  if (pollfds_.empty()) return;  // a send waits for data the caller has not released yet
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) {
    std::string waiting;
    for (auto& r : recvs)
      if (r.done < r.len) waiting += fmt::format(" {}", members_.name(r.peer));
    fail_timeout("{}: no progress for {} ms; still waiting for data from{}", what,
            timeout_.count(), waiting);
  }
  const long tick = watch_ ? 20 : 1000;
  int rc = ::poll(pollfds_.data(), pollfds_.size(), static_cast<int>(std::min<long>(left.count(), tick)));
  if (rc < 0 && errno != EINTR) fail("poll(): {}", errno_text(errno));
  if (rc == 0 && watch_) watch_(what);
}

}  // namespace kolo::transport
