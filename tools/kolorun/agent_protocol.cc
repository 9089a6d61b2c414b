#include "agent_protocol.h"

#include <fmt/format.h>

namespace kolorun {

namespace {
// The largest frame either side sends is one read of a rank's pipe or the
// job (argv and environment); anything bigger is a corrupt stream.
constexpr std::uint32_t kMaxPayload = 64u << 20;
}  // namespace

std::string encode_frame(char type, std::string_view payload) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(type)).u32(static_cast<std::uint32_t>(payload.size())).raw(payload);
  return w.bytes();
}

std::optional<Frame> FrameReader::next() {
  if (buffered() < 5) return std::nullopt;
  Reader head(std::string_view(buffer_).substr(pos_, 5));
  const char type = static_cast<char>(head.u8());
  const std::uint32_t len = head.u32();
  if (len > kMaxPayload) throw ProtocolError(fmt::format("frame of {} bytes (type {:#x})", len, type));
  if (buffered() < 5 + std::size_t{len}) return std::nullopt;
  Frame f{type, buffer_.substr(pos_ + 5, len)};
  pos_ += 5 + len;
  // Drop what was consumed once it is most of the buffer, so that the buffer
  // does not grow with everything ever received.
  if (pos_ > 65536 && pos_ * 2 > buffer_.size()) {
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  return f;
}

std::string encode_job(const JobSpec& job) {
  Writer w;
  w.str(job.host).str(job.cwd).strs(job.argv).strs(job.env);
  w.u32(static_cast<std::uint32_t>(job.ranks.size()));
  for (const auto& r : job.ranks) w.u32(static_cast<std::uint32_t>(r.rank)).strs(r.env);
  // Milliseconds: a double has no portable wire form and needs none here.
  w.u32(static_cast<std::uint32_t>(job.grace_s * 1000)).u32(job.silence_ms);
  w.u8(job.choose_master ? 1 : 0).str(job.master_iface).str(job.master_peer);
  return w.bytes();
}

JobSpec decode_job(std::string_view payload) {
  Reader r(payload);
  JobSpec job;
  job.host = r.str();
  job.cwd = r.str();
  job.argv = r.strs();
  job.env = r.strs();
  const std::uint32_t n = r.u32();
  for (std::uint32_t i = 0; i < n; ++i) {
    RankEnv re;
    re.rank = static_cast<int>(r.u32());
    re.env = r.strs();
    job.ranks.push_back(std::move(re));
  }
  job.grace_s = r.u32() / 1000.0;
  job.silence_ms = r.u32();
  job.choose_master = r.u8() != 0;
  job.master_iface = r.str();
  job.master_peer = r.str();
  if (job.argv.empty() || job.ranks.empty()) throw ProtocolError("job without a command or ranks");
  return job;
}

}  // namespace kolorun
