#include "supervisor.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "relay.h"
#include "signals.h"
#include "teardown_policy.h"

namespace kolorun {

namespace {

using Clock = std::chrono::steady_clock;

// After the last rank has exited, how long output still in flight (from what
// the ranks left behind in their process groups) is waited for.
constexpr auto kDrainTime = std::chrono::seconds(1);

struct Rank {
  RankProcess proc;
  bool exited = false;
  ChildEnd end;
  int fds[2] = {-1, -1};  // stdout, stderr pipes
  std::unique_ptr<OutputSink> relays[2];
};

class Supervisor : public JobControl {
 public:
  Supervisor(std::vector<RankProcess> procs, int signal_fd, const SupervisorOptions& opts)
      : signal_fd_(signal_fd), opts_(opts), teardown_(opts.grace_s) {
    for (auto& p : procs) {
      Rank r;
      r.proc = p;
      r.fds[0] = p.stdout_pipe;
      r.fds[1] = p.stderr_pipe;
      const std::string prefix = opts.tag_output ? fmt::format("[{}] ", p.rank) : "";
      for (int s = 0; s < 2; ++s) {
        if (r.fds[s] < 0) continue;
        if (opts.hooks != nullptr)
          r.relays[s] = opts.hooks->sink(p.rank, s + 1);
        else
          r.relays[s] = std::make_unique<LineRelay>(prefix, s == 0 ? 1 : 2);
      }
      ranks_.push_back(std::move(r));
    }
  }

  ~Supervisor() {
    if (signal_fd_ >= 0) ::close(signal_fd_);
  }

  // Stops the job before it ran (see abort_started).
  void abort(int exit_code) {
    teardown_.stop(exit_code);
    signal_groups(SIGTERM);
  }

  int run();

  void stop(int sig) override { on_signal(sig); }
  void kill_now(const std::string& why) override { escalate(why); }
  bool stopping() const override { return teardown_.stopping(); }

 private:
  void say(const std::string& text) const {
    std::string line = opts_.who + ": " + text + "\n";
    ssize_t ignored = ::write(2, line.data(), line.size());
    (void)ignored;
  }
  void handle_signals();
  void check_exits();
  void on_rank_exit(Rank& r);
  void on_signal(int sig);
  void escalate(const std::string& why);
  void read_pipe(Rank& r, int s);
  void close_pipe(Rank& r, int s);
  void signal_groups(int sig);
  std::size_t running() const;
  bool any_pipe_open() const;
  int poll_timeout_ms() const;

  std::vector<Rank> ranks_;
  int signal_fd_;
  SupervisorOptions opts_;

  TeardownPolicy teardown_;
  std::optional<Clock::time_point> job_deadline_, drain_deadline_;
};

std::size_t Supervisor::running() const {
  std::size_t n = 0;
  for (const auto& r : ranks_) n += r.exited ? 0 : 1;
  return n;
}

bool Supervisor::any_pipe_open() const {
  for (const auto& r : ranks_)
    if (r.fds[0] >= 0 || r.fds[1] >= 0) return true;
  return false;
}

// Signals every rank's process group, also of ranks that have exited: what a
// rank started (a data loader, a shell pipeline) lives on in its group. This
// is safe from hitting a stranger because an exited rank stays an unreaped
// zombie until kolorun ends, so its pid, the group's id, cannot be reused.
void Supervisor::signal_groups(int sig) {
  for (const auto& r : ranks_) ::kill(-r.proc.pid, sig);
}

// SIGKILL to every group; `why` completes "rank 3 still running ...".
void Supervisor::escalate(const std::string& why) {
  if (!teardown_.escalate()) return;
  std::string who;
  for (const auto& r : ranks_) {
    if (!r.exited) who += fmt::format("{}{}", who.empty() ? "" : ", ", r.proc.rank);
  }
  if (!who.empty()) {
    say(fmt::format("rank{} {} still running {}; sending SIGKILL", running() == 1 ? "" : "s", who, why));
  }
  signal_groups(SIGKILL);
}

void Supervisor::on_rank_exit(Rank& r) {
  if (opts_.hooks != nullptr) opts_.hooks->on_exit(r.proc.rank, r.end.how, r.end.status);
  if (!r.end.failed() || !teardown_.stop(r.end.exit_code())) return;
  if (opts_.report_failures) say(first_failure(fmt::format("rank {} {}", r.proc.rank, r.end.text()), running()));
  signal_groups(SIGTERM);
}

void Supervisor::on_signal(int sig) {
  if (sig == SIGCHLD) return;
  if (!teardown_.stop(128 + sig)) {
    // A second Ctrl-C: the user does not want to wait out the grace period.
    escalate(fmt::format("and kolorun got {} again", signal_name(sig)));
    return;
  }
  if (opts_.report_failures)
    say(fmt::format("interrupted ({}); stopping {}", signal_name(sig), plural(running(), "rank")));
  // The ranks get the signal kolorun got (not only SIGTERM), so a rank can
  // tell Ctrl-C apart from a teardown.
  signal_groups(sig);
}

// SIGCHLD is coalesced and may stand for several ranks, so every rank still
// running is checked. WNOWAIT leaves the rank a zombie (see signal_groups).
void Supervisor::check_exits() {
  for (auto& r : ranks_) {
    if (r.exited) continue;
    siginfo_t info{};
    if (::waitid(P_PID, r.proc.pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) continue;
    if (info.si_pid != r.proc.pid) continue;
    r.exited = true;
    r.end = {info.si_code, info.si_status};
    on_rank_exit(r);
  }
}

void Supervisor::handle_signals() {
  signalfd_siginfo si;
  while (::read(signal_fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    on_signal(static_cast<int>(si.ssi_signo));
  }
}

void Supervisor::close_pipe(Rank& r, int s) {
  if (r.fds[s] < 0) return;
  r.relays[s]->finish();
  ::close(r.fds[s]);
  r.fds[s] = -1;
}

// One read per wakeup, so that a rank writing without pause cannot starve
// the others, nor the signal handling.
void Supervisor::read_pipe(Rank& r, int s) {
  char buf[65536];
  ssize_t n = ::read(r.fds[s], buf, sizeof buf);
  if (n > 0) {
    r.relays[s]->feed(std::string_view(buf, static_cast<std::size_t>(n)));
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    close_pipe(r, s);
  }
}

int Supervisor::poll_timeout_ms() const {
  std::optional<Clock::time_point> next;
  auto consider = [&](const std::optional<Clock::time_point>& t) {
    if (t && (!next || *t < *next)) next = t;
  };
  if (!teardown_.stopping()) consider(job_deadline_);
  consider(teardown_.kill_deadline());
  consider(drain_deadline_);
  if (opts_.hooks != nullptr && opts_.hooks->tick_ms() >= 0)
    consider(Clock::now() + std::chrono::milliseconds(opts_.hooks->tick_ms()));
  if (!next) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*next - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left) + 1;
}

int Supervisor::run() {
  if (opts_.timeout_s > 0) {
    job_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(opts_.timeout_s));
  }
  check_exits();  // a rank may have exited before the loop started
  std::vector<pollfd> pfds;
  std::vector<std::pair<Rank*, int>> owners;
  for (;;) {
    if (running() == 0 && !drain_deadline_) {
      // What the ranks left behind gets SIGTERM now (unless the teardown
      // sent it already) and SIGKILL when kolorun ends, below.
      if (!teardown_.stopping()) signal_groups(SIGTERM);
      drain_deadline_ = Clock::now() + kDrainTime;
    }
    if (running() == 0 && (!any_pipe_open() || Clock::now() >= *drain_deadline_)) break;

    pfds.clear();
    owners.clear();
    pfds.push_back({signal_fd_, POLLIN, 0});
    owners.emplace_back(nullptr, 0);
    const bool accept = opts_.hooks == nullptr || opts_.hooks->accept_output();
    for (auto& r : ranks_) {
      for (int s = 0; s < 2; ++s) {
        if (r.fds[s] < 0 || !accept) continue;
        pfds.push_back({r.fds[s], POLLIN, 0});
        owners.emplace_back(&r, s);
      }
    }
    const std::size_t own = pfds.size();
    if (opts_.hooks != nullptr) opts_.hooks->add_fds(pfds);
    int rc = ::poll(pfds.data(), pfds.size(), poll_timeout_ms());
    if (rc < 0 && errno != EINTR) {
      say(fmt::format("poll failed: {}", std::strerror(errno)));
      teardown_.stop(1);
      escalate("after a poll failure");
      break;
    }
    for (std::size_t i = 1; i < own; ++i) {
      if (pfds[i].revents != 0) read_pipe(*owners[i].first, owners[i].second);
    }
    if (pfds[0].revents != 0) handle_signals();
    check_exits();
    if (opts_.hooks != nullptr) opts_.hooks->on_wake(pfds.data() + own, pfds.size() - own, *this);

    const auto now = Clock::now();
    if (job_deadline_ && now >= *job_deadline_ && teardown_.stop(124)) {
      say(timeout_text(opts_.timeout_s, running()));
      signal_groups(SIGTERM);
    }
    if (teardown_.grace_over(now)) escalate(fmt::format("after the {:g} s grace period", opts_.grace_s));
  }

  for (auto& r : ranks_) {
    for (int s = 0; s < 2; ++s) close_pipe(r, s);
  }
  // Nothing of the job outlives kolorun: leftovers in the ranks' groups are
  // killed before the zombies that reserve the group ids are reaped.
  signal_groups(SIGKILL);
  for (auto& r : ranks_) {
    while (::waitpid(r.proc.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  return teardown_.exit_code();
}

}  // namespace

int supervise(std::vector<RankProcess> ranks, int signal_fd, const SupervisorOptions& opts) {
  Supervisor s(std::move(ranks), signal_fd, opts);
  return s.run();
}

int abort_started(std::vector<RankProcess> ranks, int signal_fd, const SupervisorOptions& opts,
                  int exit_code) {
  Supervisor s(std::move(ranks), signal_fd, opts);
  s.abort(exit_code);
  return s.run();
}

}  // namespace kolorun
