#include "host_job.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "agent_protocol.h"
#include "outbox.h"
#include "relay.h"
#include "say.h"
#include "signals.h"
#include "teardown_policy.h"
#include "core/config.h"
#include "torchrun_env.h"

namespace kolorun {

namespace {

using Clock = std::chrono::steady_clock;

// How long an agent may take beyond the grace period to report its ranks
// gone before its connection is killed (it then SIGKILLs them itself).
constexpr auto kAgentSlack = std::chrono::seconds(10);

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string list_ranks(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += fmt::format("{}{}", i == 0 ? "" : ", ", ranks[i]);
  return s;
}

// --output-dir: the bytes go to the rank's file as they came.
class FileSink : public OutputSink {
 public:
  explicit FileSink(int fd) : fd_(fd) {}
  void feed(std::string_view data) override {
    while (!data.empty()) {
      ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  void finish() override {}

 private:
  int fd_;
};

// An agent's stderr (its own messages, ssh's): relayed with the host's name
// ("kolorun: hostB: ..."), its last line kept to explain a lost connection.
class TailSink : public OutputSink {
 public:
  explicit TailSink(const std::string& host) : relay_("kolorun: " + host + ": ", 2) {}
  void feed(std::string_view data) override {
    relay_.feed(data);
    for (char c : data) {
      if (c == '\n' || c == '\r') {
        if (!current_.empty()) last_ = current_;
        current_.clear();
      } else if (current_.size() < 1000) {
        current_.push_back(c);
      }
    }
  }
  void finish() override {
    relay_.finish();
    if (!current_.empty()) last_ = current_;
    current_.clear();
  }
  const std::string& last_line() const { return last_; }

 private:
  LineRelay relay_;
  std::string current_, last_;
};

struct Agent {
  explicit Agent(const HostRanks& h) : host(h), err(h.name) {}
  HostRanks host;
  RankProcess proc;
  std::vector<std::string> argv;
  Outbox to;
  FrameReader from;
  TailSink err;
  bool hello = false;  // kAgentHello seen
  Clock::time_point hello_at;
  bool chooser = false;          // its job has choose_master
  std::optional<JobSpec> held;   // its job, not sent until MASTER_* are known
  bool done = false;   // 'D' seen: its ranks have ended
  bool lost = false;
  bool reaped = false;
  int wait_status = 0;
  Clock::time_point last_heard;
};

struct RankState {
  Agent* agent = nullptr;
  bool exited = false;
  std::unique_ptr<OutputSink> sinks[2];
};

class HostJob : public HostJobControl {
 public:
  HostJob(int signal_fd, const HostJobOptions& opts)
      : signal_fd_(signal_fd), opts_(opts), ranks_(opts.np), teardown_(opts.grace_s, kAgentSlack) {}
  ~HostJob() {
    if (signal_fd_ >= 0) ::close(signal_fd_);
    for (int fd : opts_.files) ::close(fd);
  }
  int run(const std::vector<AgentLaunch>& launches);

  void add_host(const AgentLaunch& l) override { start(l, false); }
  void drop_host(const std::string& name) override;
  void end(int code, const std::string& text) override { fail(code, text); }

 private:
  void start(const AgentLaunch& l, bool hold);
  void master_chosen(const Frame& f);
  void drop(Agent& a);
  void read_out(Agent& a);
  void handle_frame(Agent& a, const Frame& f);
  void read_err(Agent& a);
  void on_rank_exit(Agent& a, int rank, int how, int status);
  void fail(int code, const std::string& text);
  void stop_all(int sig);
  void lose(Agent& a, const std::string& why);
  void finish_output(int rank);  // a rank's last partial lines go out
  void close_agent(Agent& a);
  void reap();
  void handle_signals();
  void on_timers();
  std::size_t ranks_running() const;
  bool finished() const;
  std::string describe_exit(const Agent& a) const;

  int signal_fd_;
  HostJobOptions opts_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::vector<RankState> ranks_;
  // Its grace period ends when the agents' own has, plus kAgentSlack.
  TeardownPolicy teardown_;
  std::optional<Clock::time_point> job_deadline_;
  bool master_pending_ = false;  // an agent is choosing MASTER_ADDR/MASTER_PORT
  Clock::time_point last_beat_ = Clock::now();
};

std::size_t HostJob::ranks_running() const {
  std::size_t n = 0;
  for (const auto& r : ranks_) n += (!r.exited && r.agent != nullptr && !r.agent->lost && !r.agent->held) ? 1 : 0;
  return n;
}

bool HostJob::finished() const {
  if (opts_.elastic != nullptr && !teardown_.stopping() && !opts_.elastic->finished()) return false;
  for (const auto& a : agents_) {
    if (!a->reaped || a->proc.stdout_pipe >= 0 || a->proc.stderr_pipe >= 0) return false;
  }
  return true;
}

void HostJob::start(const AgentLaunch& l, bool hold) {
  auto a = std::make_unique<Agent>(l.host);
  a->argv = l.argv;
  RankSpec spec;
  spec.rank = -1;
  spec.path = l.path;
  spec.argv = l.argv;
  spec.env = kolo::config::environment();
  spec.stdin_pipe = true;
  // This host's agent outlives a SIGKILLed kolorun just long enough to kill
  // its ranks' process groups (what the ranks started too), as a remote
  // agent does when its ssh connection closes.
  if (l.host.local) spec.death_signal = SIGTERM;
  a->proc = spawn_rank(spec);
  a->to.reset(a->proc.stdin_pipe);
  a->chooser = l.job.choose_master;
  if (hold) a->held = l.job;
  else a->to.push(encode_frame('J', encode_job(l.job)));
  a->last_heard = Clock::now();
  for (int r : l.host.ranks) {
    if (r >= static_cast<int>(ranks_.size())) ranks_.resize(r + 1);  // an elastic job's new workers
    RankState& rs = ranks_.at(r);
    rs.agent = a.get();
    for (int s = 0; s < 2; ++s) {
      if (!opts_.files.empty())
        rs.sinks[s] = std::make_unique<FileSink>(opts_.files[2 * r + s]);
      else
        rs.sinks[s] = std::make_unique<LineRelay>(opts_.tag_output ? fmt::format("[{}] ", r) : "", s + 1);
    }
  }
  agents_.push_back(std::move(a));
}

std::string HostJob::describe_exit(const Agent& a) const {
  if (!a.reaped) return "";
  const int st = a.wait_status;
  std::string how = WIFEXITED(st) ? fmt::format("exited with code {}", WEXITSTATUS(st))
                                  : fmt::format("was killed by {}", signal_name(WTERMSIG(st)));
  const std::string prog = a.host.local ? "its agent" : a.argv.front();
  std::string text = fmt::format("{} {}", prog, how);
  if (!a.err.last_line().empty()) text += ": " + a.err.last_line();
  return text;
}

void HostJob::fail(int code, const std::string& text) {
  if (!teardown_.stop(code)) {
    say(text);
    return;
  }
  say(first_failure(text, ranks_running()));
  // Once: a second stop frame would make the agents skip the grace period.
  stop_all(SIGTERM);
}

// Called after teardown_.stop(): every agent gets a stop frame for `sig`.
void HostJob::stop_all(int sig) {
  for (auto& a : agents_) {
    if (a->held) drop(*a);  // its ranks never started: nothing to stop
  }
  Writer w;
  w.u8(static_cast<std::uint8_t>(sig));
  const std::string frame = encode_frame('S', w.bytes());
  for (auto& a : agents_) {
    if (!a->lost && !a->done) a->to.push(frame);
  }
}

void HostJob::close_agent(Agent& a) {
  // Killing the ssh client (or the local agent) closes the agent's stdin on
  // its host; an agent still alive there then SIGKILLs its ranks.
  if (!a.reaped) ::kill(-a.proc.pid, SIGKILL);
  for (int* fd : {&a.proc.stdout_pipe, &a.proc.stderr_pipe, &a.proc.stdin_pipe}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  a.to.reset(-1);
}

void HostJob::finish_output(int rank) {
  for (auto& s : ranks_[rank].sinks) {
    if (s) s->finish();
  }
}

void HostJob::lose(Agent& a, const std::string& why) {
  if (a.lost || a.done) return;
  std::vector<int> still;
  for (int r : a.host.ranks) {
    if (!ranks_[r].exited) still.push_back(r);
  }
  a.lost = true;
  if (still.empty()) {
    close_agent(a);
    return;  // every rank had reported its exit: nothing was lost
  }
  for (int r : still) finish_output(r);
  if (opts_.elastic != nullptr && !teardown_.stopping()) {
    close_agent(a);
    opts_.elastic->host_lost(a.host.name, still, why);
    return;
  }
  fail(1, fmt::format("lost host {} ({}): {}", a.host.name, list_ranks(still), why));
  close_agent(a);
}

void HostJob::drop(Agent& a) {
  a.lost = true;
  a.held.reset();
  for (int r : a.host.ranks) {
    ranks_[r].exited = true;
    finish_output(r);
  }
  close_agent(a);
}

void HostJob::drop_host(const std::string& name) {
  for (auto& a : agents_) {
    if (a->host.name == name && !a->lost && !a->done) drop(*a);
  }
}

void HostJob::master_chosen(const Frame& f) {
  Reader r(f.payload);
  const std::string addr = r.str();
  const int port = static_cast<int>(r.u32());
  master_pending_ = false;
  const auto master = master_variables(addr, port);
  for (auto& a : agents_) {
    if (!a->held) continue;
    for (auto& rank : a->held->ranks) rank.env.insert(rank.env.end(), master.begin(), master.end());
    a->to.push(encode_frame('J', encode_job(*a->held)));
    a->held.reset();
    a->last_heard = Clock::now();  // its silence counts from now (it was not expected to talk)
  }
}

void HostJob::on_rank_exit(Agent& a, int rank, int how, int status) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size()) || ranks_[rank].agent != &a || ranks_[rank].exited) return;
  ranks_[rank].exited = true;
  if (opts_.elastic != nullptr && !teardown_.stopping()) {
    opts_.elastic->rank_exited(rank, a.host.name, how, status);
    return;
  }
  const ChildEnd end{how, status};
  if (!end.failed() || teardown_.stopping()) return;
  fail(end.exit_code(), fmt::format("rank {} on {} {}", rank, a.host.name, end.text()));
}

void HostJob::handle_frame(Agent& a, const Frame& f) {
  switch (f.type) {
    case 'O': {
      Reader r(f.payload);
      const int rank = static_cast<int>(r.u32());
      const int stream = r.u8();
      const std::string_view data = r.rest();
      if (rank < 0 || rank >= static_cast<int>(ranks_.size()) || ranks_[rank].agent != &a || (stream != 1 && stream != 2))
        return;
      auto& sink = ranks_[rank].sinks[stream - 1];
      if (!sink) return;
      if (data.empty()) {
        sink->finish();
      } else {
        sink->feed(data);
      }
      return;
    }
    case 'X': {
      Reader r(f.payload);
      const int rank = static_cast<int>(r.u32());
      const int how = r.u8();
      const int status = static_cast<int>(r.u32());
      on_rank_exit(a, rank, how, status);
      return;
    }
    case 'F': {
      Reader r(f.payload);
      const int code = r.u8();
      fail(code, std::string(r.rest()));
      return;
    }
    case 'P':
      if (a.chooser && master_pending_) master_chosen(f);
      return;
    case 'D':
      a.done = true;
      return;
    default:  // 'R', 'H'
      return;
  }
}

// What the remote shell printed before the agent's hello: the hello, or the
// start of it that one read happened to end with, belongs to the agent and is
// not shown as the shell's output.
std::string_view before_hello(std::string_view got) {
  if (const std::size_t at = got.find(kAgentHello); at != std::string_view::npos) return got.substr(0, at);
  for (std::size_t k = std::min(got.size(), kAgentHello.size() - 1); k > 0; --k) {
    if (got.substr(got.size() - k) == kAgentHello.substr(0, k)) return got.substr(0, got.size() - k);
  }
  return got;
}

void HostJob::read_out(Agent& a) {
  char buf[65536];
  ssize_t n = ::read(a.proc.stdout_pipe, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    ::close(a.proc.stdout_pipe);
    a.proc.stdout_pipe = -1;
    if (a.done || a.lost) return;
    // Say why with ssh's exit status and last words: wait briefly for both.
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < until && (!a.reaped || a.proc.stderr_pipe >= 0)) {
      if (a.proc.stderr_pipe >= 0) {
        pollfd p{a.proc.stderr_pipe, POLLIN, 0};
        if (::poll(&p, 1, 20) > 0) read_err(a);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      reap();
    }
    const std::string how = describe_exit(a);
    if (!a.hello) {
      lose(a, fmt::format("kolorun's agent did not start there (`{} ...`){}", a.argv.front(),
                          how.empty() ? "" : ": " + how));
    } else {
      lose(a, fmt::format("the connection to its agent closed{}", how.empty() ? "" : " (" + how + ")"));
    }
    return;
  }
  a.last_heard = Clock::now();
  a.from.feed(std::string_view(buf, static_cast<std::size_t>(n)));
  if (!a.hello) {
    const std::string_view got = a.from.pending();
    const std::size_t k = std::min(got.size(), kAgentHello.size());
    if (got.substr(0, k) != kAgentHello.substr(0, k)) {
      lose(a, fmt::format("the remote shell printed '{}' before kolorun's agent started (a shell startup file "
                          "must not print when not interactive)",
                          before_hello(got).substr(0, 200)));
      return;
    }
    if (k < kAgentHello.size()) return;
    a.from.consume(kAgentHello.size());
    a.hello = true;
    a.hello_at = Clock::now();
  }
  try {
    while (auto f = a.from.next()) handle_frame(a, *f);
  } catch (const ProtocolError& e) {
    lose(a, fmt::format("bad frame from its agent: {}", e.what()));
  }
}

void HostJob::read_err(Agent& a) {
  char buf[65536];
  ssize_t n = ::read(a.proc.stderr_pipe, buf, sizeof buf);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    a.err.finish();
    ::close(a.proc.stderr_pipe);
    a.proc.stderr_pipe = -1;
    return;
  }
  a.err.feed(std::string_view(buf, static_cast<std::size_t>(n)));
}

void HostJob::reap() {
  for (auto& a : agents_) {
    if (a->reaped) continue;
    int st = 0;
    if (::waitpid(a->proc.pid, &st, WNOHANG) == a->proc.pid) {
      a->reaped = true;
      a->wait_status = st;
    }
  }
}

void HostJob::handle_signals() {
  signalfd_siginfo si;
  while (::read(signal_fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    const int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) continue;
    if (teardown_.stop(128 + sig)) {
      say(fmt::format("interrupted ({}); stopping {} on {}", signal_name(sig), plural(ranks_running(), "rank"),
                      plural(agents_.size(), "host")));
    }
    // A second signal reaches the agents too: they skip the grace period.
    stop_all(sig);
  }
}

void HostJob::on_timers() {
  const auto now = Clock::now();
  if (now - last_beat_ >= kHeartbeat) {
    last_beat_ = now;
    const std::string beat = encode_frame('H', {});
    for (auto& a : agents_) {
      if (!a->lost && !a->done) a->to.push(beat);
    }
  }
  for (auto& a : agents_) {
    a->to.flush();
    // An agent waiting for its job says nothing until it has it.
    if (!a->lost && !a->done && !a->held && a->proc.stdout_pipe >= 0 && now - a->last_heard > seconds(opts_.silence_s))
      lose(*a, fmt::format("nothing came from its agent for {:g} s (the host or its link is down?)", opts_.silence_s));
    if (master_pending_ && a->chooser && a->hello && !teardown_.stopping() && now - a->hello_at > seconds(opts_.silence_s))
      fail(1, fmt::format("the agent on {} (rank 0's host) reported no MASTER_ADDR/MASTER_PORT within {:g} s "
                          "(is the kolorun there the same version as this one?)",
                          a->host.name, opts_.silence_s));
  }
  if (opts_.elastic != nullptr && !teardown_.stopping()) opts_.elastic->tick(*this);
  if (job_deadline_ && now >= *job_deadline_ && teardown_.stop(124)) {
    say(timeout_text(opts_.timeout_s, ranks_running()));
    stop_all(SIGTERM);
  }
  if (teardown_.grace_over(now)) {
    teardown_.escalate();
    for (auto& a : agents_) {
      if (a->lost || a->done) continue;
      say(fmt::format("the agent on {} has not ended its ranks {:g} s after the grace period; closing its connection",
                      a->host.name, std::chrono::duration<double>(kAgentSlack).count()));
      a->lost = true;
      close_agent(*a);
    }
  }
}

int HostJob::run(const std::vector<AgentLaunch>& launches) {
  for (const auto& l : launches) master_pending_ = master_pending_ || l.job.choose_master;
  for (const auto& l : launches) {
    try {
      start(l, master_pending_ && !l.job.choose_master);
    } catch (const std::exception& e) {
      fail(1, fmt::format("cannot start the agent for {}: {}", l.host.name, e.what()));
      break;
    }
  }
  if (opts_.timeout_s > 0) job_deadline_ = Clock::now() + seconds(opts_.timeout_s);
  std::vector<pollfd> pfds;
  std::vector<std::pair<Agent*, int>> owners;
  while (!finished()) {
    pfds.clear();
    owners.clear();
    pfds.push_back({signal_fd_, POLLIN, 0});
    owners.emplace_back(nullptr, 0);
    for (auto& a : agents_) {
      if (a->proc.stdout_pipe >= 0) {
        pfds.push_back({a->proc.stdout_pipe, POLLIN, 0});
        owners.emplace_back(a.get(), 1);
      }
      if (a->proc.stderr_pipe >= 0) {
        pfds.push_back({a->proc.stderr_pipe, POLLIN, 0});
        owners.emplace_back(a.get(), 2);
      }
      if (a->to.events() != 0) {
        pfds.push_back({a->to.fd(), POLLOUT, 0});
        owners.emplace_back(a.get(), 0);
      }
    }
    if (::poll(pfds.data(), pfds.size(), 250) < 0 && errno != EINTR) {
      say(fmt::format("poll failed: {}", std::strerror(errno)));
      teardown_.stop(1);
      break;
    }
    for (std::size_t i = 1; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      Agent& a = *owners[i].first;
      if (owners[i].second == 1 && a.proc.stdout_pipe == pfds[i].fd) read_out(a);
      else if (owners[i].second == 2 && a.proc.stderr_pipe == pfds[i].fd) read_err(a);
      else if (owners[i].second == 0) a.to.flush();
    }
    if (pfds[0].revents != 0) handle_signals();
    reap();
    on_timers();
  }
  for (auto& a : agents_) close_agent(*a);
  for (auto& r : ranks_) {
    for (auto& s : r.sinks) {
      if (s) s->finish();
    }
  }
  return teardown_.exit_code();
}

}  // namespace

int run_host_job(const std::vector<AgentLaunch>& agents, int signal_fd, const HostJobOptions& opts) {
  HostJob job(signal_fd, opts);
  return job.run(agents);
}

}  // namespace kolorun
