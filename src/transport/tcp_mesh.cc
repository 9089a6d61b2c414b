#include "transport/tcp_mesh.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstdint>

#include "core/config.h"
#include "core/error.h"

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
    : rank_(rank), size_(size), peers_(size),
      timeout_(std::chrono::milliseconds(config::timeout_ms())) {
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

bool TcpMesh::try_io(std::span<SendOp> sends, std::span<RecvOp> recvs, bool& moved,
                     const char* what) {
  for (auto& s : sends) {
    while (s.done < s.avail) {
      ssize_t n = ::send(peers_[s.peer].get(), s.data + s.done, s.avail - s.done,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        s.done += static_cast<std::size_t>(n);
        moved = true;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      fail_io("{}: lost connection to rank {} while sending: {}", what, s.peer, errno_text(errno));
    }
  }
  bool received = false;
  for (auto& r : recvs) {
    while (r.done < r.len) {
      ssize_t n = ::recv(peers_[r.peer].get(), r.data + r.done, r.len - r.done, MSG_DONTWAIT);
      if (n > 0) {
        r.done += static_cast<std::size_t>(n);
        received = moved = true;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n == 0) fail_io("{}: rank {} closed its connection (did it exit?)", what, r.peer);
      fail_io("{}: lost connection to rank {}: {}", what, r.peer, errno_text(errno));
    }
  }
  return received;
}

void TcpMesh::wait_io(std::span<SendOp> sends, std::span<RecvOp> recvs,
                      Clock::time_point deadline, const char* what) {
  pollfds_.clear();
  for (auto& s : sends)
    if (s.done < s.avail) pollfds_.push_back({peers_[s.peer].get(), POLLOUT, 0});
  for (auto& r : recvs)
    if (r.done < r.len) pollfds_.push_back({peers_[r.peer].get(), POLLIN, 0});
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
