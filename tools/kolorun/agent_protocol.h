// What kolorun and its per-host agents say to each other over the agent's
// stdin and stdout (an ssh session, or pipes for the launching host).
//
// Every message is a frame: 1 byte type, 4 bytes little-endian payload
// length, payload. ssh without a terminal passes bytes unchanged, and a frame
// never depends on lines, so a rank's output may hold any bytes.
//
// The agent first writes kAgentHello (unframed): bytes that a shell startup
// file printed before the agent started would otherwise be read as frames;
// the launcher refuses them and shows them instead.
//
//   launcher -> agent                      agent -> launcher
//   'J' the job (JobSpec), first           'P' str address, u32 port: the MASTER_ADDR
//   'S' u8 signal: stop the ranks with it      and MASTER_PORT it chose (choose_master)
//   'H' heartbeat (every second)           'R' all ranks started
//                                          'F' u8 exit code, text: could not start
//                                          'O' u32 rank, u8 stream (1/2), bytes
//                                          'X' u32 rank, u8 how (CLD_*), i32 status
//                                          'H' heartbeat (every second)
//                                          'D' every rank has ended, agent exits
//
// torchrun's MASTER_PORT must be free on rank 0's host, which only that
// host's agent can tell: it gets choose_master, picks the port (and the
// address the other hosts reach it at) and reports them in 'P' before it
// starts its ranks; the launcher holds the other hosts' 'J' until then and
// adds both to their ranks' variables (torchrun_env.h).
//
// The secret travels in 'J' over the agent's stdin, so it never appears on a
// command line that `ps` shows, on either host.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/codec.h"

namespace kolorun {

inline constexpr std::string_view kAgentHello = "KOLORUN-AGENT-1\n";

// How often each side sends 'H' (the table above).
inline constexpr auto kHeartbeat = std::chrono::seconds(1);

// A frame that does not parse: the peer is not a kolorun agent of this
// version, or the stream is corrupt. Payloads are written and read with
// kolo's one wire codec.
using kolo::net::ProtocolError;
using kolo::net::Reader;
using kolo::net::Writer;

struct Frame {
  char type = 0;
  std::string payload;
};

std::string encode_frame(char type, std::string_view payload);

// Reassembles frames from the bytes of a stream, whatever the read sizes.
class FrameReader {
 public:
  void feed(std::string_view data) { buffer_.append(data); }
  // The next complete frame, if there is one; throws ProtocolError on a
  // frame larger than any kolorun sends.
  std::optional<Frame> next();
  std::size_t buffered() const { return buffer_.size() - pos_; }
  // Bytes received but not yet consumed (to show what a shell printed).
  std::string_view pending() const { return std::string_view(buffer_).substr(pos_); }
  void consume(std::size_t n) { pos_ += n; }

 private:
  std::string buffer_;
  std::size_t pos_ = 0;
};

// The job as one agent runs it.
struct RankEnv {
  int rank = 0;                  // global rank
  std::vector<std::string> env;  // KOLO_* of this rank, "NAME=value"
};

struct JobSpec {
  std::string host;              // the host's name as the launcher knows it (for messages)
  std::string cwd;               // the launcher's working directory
  std::vector<std::string> argv; // the ranks' command, argv[0] as typed
  std::vector<std::string> env;  // the launcher's KOLO_* settings, then -x variables ("NAME=value"), set in every rank
  std::vector<RankEnv> ranks;
  double grace_s = 3;            // SIGTERM -> SIGKILL
  std::uint32_t silence_ms = 15000;  // no frame from the launcher for this long: it is gone
  // This host runs rank 0: choose MASTER_ADDR (reachable_address(master_iface,
  // master_peer) on this host) and a free MASTER_PORT, send 'P', and give
  // both to the ranks.
  bool choose_master = false;
  std::string master_iface, master_peer;
};

std::string encode_job(const JobSpec& job);
JobSpec decode_job(std::string_view payload);

}  // namespace kolorun
