#include "agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "agent_protocol.h"
#include "outbox.h"
#include "rank_env.h"
#include "say.h"
#include "signals.h"
#include "spawn.h"
#include "supervisor.h"
#include "torchrun_env.h"

namespace kolorun {

namespace {

using Clock = std::chrono::steady_clock;

// Frames queued beyond this stop the reading of the ranks' pipes until the
// link has taken them (see SupervisorHooks::accept_output).
constexpr std::size_t kMaxQueued = 8u << 20;

std::string output_frame(int rank, int stream, std::string_view data) {
  Writer w;
  w.u32(static_cast<std::uint32_t>(rank)).u8(static_cast<std::uint8_t>(stream)).raw(data);
  return encode_frame('O', w.bytes());
}

// Sends one stream of one rank as 'O' frames; an empty frame ends it.
class FrameSink : public OutputSink {
 public:
  FrameSink(Outbox& out, int rank, int stream) : out_(out), rank_(rank), stream_(stream) {}
  void feed(std::string_view data) override { out_.push(output_frame(rank_, stream_, data)); }
  void finish() override { out_.push(output_frame(rank_, stream_, {})); }

 private:
  Outbox& out_;
  int rank_, stream_;
};

// The agent's side of the supervision loop: frames out on stdout, control
// frames in on stdin, heartbeats both ways.
class AgentLink : public SupervisorHooks {
 public:
  AgentLink(Outbox& out, FrameReader& in, const JobSpec& job, std::string who)
      : out_(out), in_(in), job_(job), who_(std::move(who)), last_heard_(Clock::now()),
        last_sent_(Clock::now()) {}

  std::unique_ptr<OutputSink> sink(int rank, int stream) override {
    return std::make_unique<FrameSink>(out_, rank, stream);
  }

  void on_exit(int rank, int how, int status) override {
    Writer w;
    w.u32(static_cast<std::uint32_t>(rank)).u8(static_cast<std::uint8_t>(how)).u32(static_cast<std::uint32_t>(status));
    out_.push(encode_frame('X', w.bytes()));
  }

  void add_fds(std::vector<pollfd>& fds) override {
    fds.push_back({in_open_ ? 0 : -1, POLLIN, 0});
    fds.push_back({out_.fd(), out_.events(), 0});
  }

  void on_wake(const pollfd* fds, std::size_t n, JobControl& job) override {
    if (n >= 1 && fds[0].revents != 0) read_control(job);
    out_.flush();
    const auto now = Clock::now();
    if (now - last_sent_ >= kHeartbeat) {
      out_.push(encode_frame('H', {}));
      last_sent_ = now;
    }
    if (!gone_ && now - last_heard_ > std::chrono::milliseconds(job_.silence_ms)) {
      gone_ = true;
      job.kill_now(fmt::format("and nothing came from the launching kolorun for {:g} s", job_.silence_ms / 1000.0));
    }
  }

  int tick_ms() const override { return 250; }
  bool accept_output() const override { return out_.queued() < kMaxQueued; }

 private:
  void read_control(JobControl& job) {
    char buf[4096];
    ssize_t got = ::read(0, buf, sizeof buf);
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (got <= 0) {
      in_open_ = false;
      if (!gone_) {
        gone_ = true;
        job.kill_now("and the launching kolorun is gone (its connection closed)");
      }
      return;
    }
    last_heard_ = Clock::now();
    in_.feed(std::string_view(buf, static_cast<std::size_t>(got)));
    try {
      while (auto f = in_.next()) {
        if (f->type != 'S') continue;
        // The launcher's first stop meets an agent that may be stopping
        // already (its own rank failed): that stop must keep the grace
        // period; only a second one (a second Ctrl-C) skips it.
        const int sig = Reader(f->payload).u8();
        if (stops_++ == 0 && job.stopping()) continue;
        job.stop(sig);
      }
    } catch (const ProtocolError& e) {
      say_as(who_, fmt::format("bad frame from the launching kolorun: {}", e.what()));
      in_open_ = false;
      gone_ = true;
      job.kill_now("after a bad frame from the launching kolorun");
    }
  }

  Outbox& out_;
  FrameReader& in_;
  const JobSpec& job_;
  std::string who_;
  Clock::time_point last_heard_, last_sent_;
  bool in_open_ = true;
  bool gone_ = false;
  int stops_ = 0;  // stop frames received
};

// Reads stdin until the job frame; nullopt (after saying why) when stdin
// ends first or the launcher sends nothing for a minute.
std::optional<JobSpec> read_job(FrameReader& in) {
  for (;;) {
    try {
      if (auto f = in.next()) {
        if (f->type == 'J') return decode_job(f->payload);
        continue;  // a heartbeat before the job
      }
    } catch (const ProtocolError& e) {
      say_as("kolorun agent", fmt::format("bad job from the launching kolorun: {}", e.what()));
      return std::nullopt;
    }
    pollfd p{0, POLLIN, 0};
    if (::poll(&p, 1, 60000) == 0) {
      say_as("kolorun agent", "no job from the launching kolorun within 60 s");
      return std::nullopt;
    }
    char buf[65536];
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return std::nullopt;  // the launcher went away before sending it
    in.feed(std::string_view(buf, static_cast<std::size_t>(n)));
  }
}

void send_failure(Outbox& out, int code, const std::string& text) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(code)).raw(text);
  out.push(encode_frame('F', w.bytes()));
}

// The job cannot start on this host: says why, and that no rank runs here.
int refuse(Outbox& out, int code, const std::string& text) {
  send_failure(out, code, text);
  out.push(encode_frame('D', {}));
  out.drain(5000);
  return 0;
}

// choose_master (agent_protocol.h): reports MASTER_ADDR and MASTER_PORT to
// the launcher and adds them to this host's ranks. False after refusing.
bool choose_master(Outbox& out, JobSpec& job) {
  std::string addr;
  int port = 0;
  try {
    addr = reachable_address(job.master_iface, job.master_peer);
    port = free_master_port();
  } catch (const std::exception& e) {
    refuse(out, 1, fmt::format("cannot choose torchrun's MASTER_ADDR and MASTER_PORT on {} (rank 0's host): {}",
                               job.host, e.what()));
    return false;
  }
  Writer w;
  w.str(addr).u32(static_cast<std::uint32_t>(port));
  out.push(encode_frame('P', w.bytes()));
  const auto master = master_variables(addr, port);
  for (auto& r : job.ranks) r.env.insert(r.env.end(), master.begin(), master.end());
  return true;
}

}  // namespace

int agent_main() {
  // Nothing of the agent may reach stdout but frames.
  Outbox out(1);
  out.push(kAgentHello);
  FrameReader in;
  std::optional<JobSpec> job = read_job(in);
  if (!job) return 1;
  // The launcher prefixes the agent's stderr with "kolorun: <host>: ".
  const std::string who = "agent";
  ::fcntl(0, F_SETFL, ::fcntl(0, F_GETFL) | O_NONBLOCK);

  // The ranks inherit the agent's environment (the remote login's, or the
  // launcher's on its own host) with the -x variables on top; PATH among
  // them decides where the command is looked up.
  for (const auto& kv : job->env) {
    const auto eq = kv.find('=');
    ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
  if (::chdir(job->cwd.c_str()) != 0)
    return refuse(out, 1, fmt::format("cannot change to the working directory '{}' on {}: {}", job->cwd,
                                      job->host, std::strerror(errno)));
  std::string exe;
  try {
    exe = resolve_executable(job->argv.front());
  } catch (const ExecError& e) {
    return refuse(out, 2, fmt::format("{} (on {})", e.what(), job->host));
  }
  if (job->choose_master && !choose_master(out, *job)) return 0;

  block_job_signals();
  const int signal_fd = open_signal_fd();
  AgentLink link(out, in, *job, who);
  SupervisorOptions sup;
  sup.grace_s = job->grace_s;
  sup.who = who;
  sup.report_failures = false;  // the launcher words them, with the host
  sup.hooks = &link;

  std::vector<RankProcess> ranks;
  for (const auto& r : job->ranks) {
    RankSpec spec;
    spec.rank = r.rank;
    spec.path = exe;
    spec.argv = job->argv;
    spec.env = environment_with(r.env);
    try {
      ranks.push_back(spawn_rank(spec));
    } catch (const std::exception& e) {
      const bool exec = dynamic_cast<const ExecError*>(&e) != nullptr;
      send_failure(out, exec ? 2 : 1,
                   exec ? fmt::format("{} (on {})", e.what(), job->host)
                        : fmt::format("cannot start rank {} on {}: {}", r.rank, job->host, e.what()));
      if (ranks.empty()) {
        ::close(signal_fd);
      } else {
        abort_started(std::move(ranks), signal_fd, sup, 1);
      }
      out.push(encode_frame('D', {}));
      out.drain(5000);
      return 0;
    }
  }
  out.push(encode_frame('R', {}));
  supervise(std::move(ranks), signal_fd, sup);
  out.push(encode_frame('D', {}));
  out.drain(5000);
  return 0;
}

}  // namespace kolorun
