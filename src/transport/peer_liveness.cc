#include "transport/peer_liveness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

namespace kolo::transport {

PeerLiveness::PeerLiveness(int peers, long peer_ms)
    : peer_ms_(peer_ms), suspect_since_(peers), checked_(peers) {}

long PeerLiveness::silent_ms(int peer, int fd, Clock::time_point now) {
  if (peer_ms_ <= 0 || now - checked_[peer] < std::chrono::milliseconds(250)) return -1;
  checked_[peer] = now;
  tcp_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return -1;  // the I/O will say why
  // tcpi_unacked: segments in flight; tcpi_probes: window probes sent and not
  // answered; tcpi_last_ack_recv: ms since the last acknowledgement of any kind.
  const bool waiting = info.tcpi_unacked > 0 || info.tcpi_probes > 0;
  if (!waiting || info.tcpi_last_ack_recv < static_cast<unsigned>(peer_ms_)) {
    suspect_since_[peer] = Clock::time_point{};
    return -1;
  }
  if (suspect_since_[peer] == Clock::time_point{}) {
    suspect_since_[peer] = now;
    return -1;
  }
  if (now - suspect_since_[peer] < std::chrono::seconds(1)) return -1;
  return static_cast<long>(info.tcpi_last_ack_recv);
}

}  // namespace kolo::transport
