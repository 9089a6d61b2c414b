// Whether a peer's host still answers, for data connections in a collective.
//
// A live peer may be late to a collective for minutes (a checkpoint, an
// evaluation): what a rank sent it sits in its receive buffer, the window
// closes, and the sender's kernel probes the window while the late peer's
// kernel answers. That peer is slow, not lost: KOLO_TIMEOUT_MS bounds it. The
// kernel's TCP_USER_TIMEOUT cannot tell the two apart (Linux, 6.18 here,
// aborts a window probed that long even when every probe is answered), so
// data sockets leave it off and this watch reads TCP_INFO instead: a peer is
// lost when this side has data in flight or a window probe outstanding and
// nothing at all, not even a probe's answer, has come back for
// KOLO_PEER_TIMEOUT_MS — seen twice, at least a second apart, because a live
// peer's probe answer is outstanding for one round trip.
//
// A host that dies while its window has long been closed is seen at the next
// window probe, whose interval backs off (doubling, at most 120 s): the
// detection time grows with how long the window was already closed.
#pragma once

#include <chrono>
#include <vector>

namespace kolo::transport {

class PeerLiveness {
 public:
  using Clock = std::chrono::steady_clock;

  // peer_ms: KOLO_PEER_TIMEOUT_MS (0 or less: never declares a peer lost).
  PeerLiveness(int peers, long peer_ms);

  // Call while a transfer makes no progress; returns the milliseconds since
  // fd's peer acknowledged anything when it counts as lost, else -1. Reads
  // TCP_INFO at most every 250 ms per peer.
  long silent_ms(int peer, int fd, Clock::time_point now);

  long peer_ms() const { return peer_ms_; }

 private:
  long peer_ms_;
  std::vector<Clock::time_point> suspect_since_;  // first sighting of silence; {} = none
  std::vector<Clock::time_point> checked_;
};

}  // namespace kolo::transport
