#include "transport/tcp_mesh.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdint>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"

namespace kolo::transport {

namespace {

constexpr std::uint32_t kHelloMagic = 0x6b6f6c6f;  // "kolo"

struct Hello {
  std::uint32_t magic;
  std::int32_t rank;
  std::int32_t size;
};

std::pair<std::string, int> split_addr(const std::string& addr) {
  auto colon = addr.rfind(':');
  return {addr.substr(0, colon), std::stoi(addr.substr(colon + 1))};
}

}  // namespace

TcpMesh::TcpMesh(rdv::StoreClient& store, const std::string& prefix, int rank, int size)
    : rank_(rank), size_(size), hdr_sent_(size, kHeader), hdr_recvd_(size, kHeader),
      hdr_in_(size), peers_(size),
      timeout_(std::chrono::milliseconds(config::timeout_ms() > 0 ? config::timeout_ms()
                                                                   : std::int64_t{1} << 40)),
      stall_warn_(std::chrono::milliseconds(config::stall_warn_ms())) {
  listener_ = listen_on("0.0.0.0");
  store.set(fmt::format("{}/addr/{}", prefix, rank),
            fmt::format("{}:{}", store.local_address(), listener_.port));
  const auto rdv_timeout = std::chrono::milliseconds(config::rendezvous_timeout_ms());
  const auto deadline = Clock::now() + rdv_timeout;

  // Lower ranks accept, higher ranks connect: each pair gets one connection.
  for (int peer = 0; peer < rank; ++peer) {
    auto [host, port] = split_addr(store.get(fmt::format("{}/addr/{}", prefix, peer), rdv_timeout));
    Fd fd = connect_until(host, port, deadline, fmt::format("rank {}", peer));
    Hello hello{kHelloMagic, rank, size};
    write_all(fd.get(), &hello, sizeof hello, fmt::format("rank {}", peer));
    peers_[peer] = std::move(fd);
  }
  for (int n = rank + 1; n < size; ++n) {
    Fd fd = accept_until(listener_, deadline, fmt::format("{} more ranks to connect", size - n));
    Hello hello{};
    read_all(fd.get(), &hello, sizeof hello, deadline, "a connecting rank");
    if (hello.magic != kHelloMagic || hello.size != size || hello.rank <= rank ||
        hello.rank >= size || peers_[hello.rank])
      fail("unexpected connection (magic {:#x}, rank {}, size {}) while building the mesh",
           hello.magic, hello.rank, hello.size);
    peers_[hello.rank] = std::move(fd);
  }
  const int buf = static_cast<int>(config::tcp_buffer_bytes());
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    tune_data_socket(peers_[p].get(), buf);
    set_nonblocking(peers_[p].get(), true);
  }
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
    fail_io("lost connection to rank {} while sending: {}", peer, errno_text(errno));
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
        fail_mismatch(current_, previous_, rank_, hdr_in_[peer], peer);
      return static_cast<std::size_t>(n) - h;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n == 0) fail_io("{}: rank {} closed its connection (did it exit?)", what, peer);
    fail_io("{}: lost connection to rank {}: {}", what, peer, errno_text(errno));
  }
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
      waiting += fmt::format(" {} ({} of {} bytes received)", r.peer, r.done, r.len);
  for (auto& s : sends)
    if (s.done < s.avail) waiting += fmt::format(" {} (not taking data)", s.peer);
  log(LogLevel::Warn, "stall: collective #{} {} ({}) has made no progress for {} ms; waiting for rank(s){}",
      current_.seq, current_.call(), what, stall_warn_.count(), waiting);
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
      if (r.done < r.len) waiting += fmt::format(" {}", r.peer);
    fail_io("{}: no progress for {} ms; still waiting for data from rank(s){}", what,
            timeout_.count(), waiting);
  }
  int rc = ::poll(pollfds_.data(), pollfds_.size(), static_cast<int>(std::min<long>(left.count(), 1000)));
  if (rc < 0 && errno != EINTR) fail("poll(): {}", errno_text(errno));
}

}  // namespace kolo::transport
