// Supervision of a running job: one poll loop that relays the ranks' output,
// notices ranks exiting (SIGCHLD), kolorun's own signals and the job's
// deadline, and tears the job down when it has to.
//
// Teardown (its policy, shared with host_job.h: teardown_policy.h): the
// first rank to exit non-zero or by a signal fails the job.
// Every rank's process group then gets SIGTERM, and SIGKILL once the grace
// period has passed; the loop keeps relaying output meanwhile, so the last
// words of the dying ranks (often the real error) are not lost. SIGINT,
// SIGTERM or SIGHUP to kolorun and --timeout stop the job the same way; a
// second signal while stopping skips the rest of the grace period.
//
// Exit code: the failing rank's code (128+signal when it died by a signal),
// 128+signal after kolorun was signalled, 124 after --timeout, 0 when every
// rank exited 0.
#pragma once

#include <poll.h>

#include <memory>
#include <string>
#include <vector>

#include "relay.h"
#include "spawn.h"

namespace kolorun {

// What a host's agent (agent.h) can ask of the job it supervises.
class JobControl {
 public:
  virtual ~JobControl() = default;
  // As if kolorun got `sig`: the ranks get it, SIGKILL after the grace period;
  // a second call skips the rest of the grace period.
  virtual void stop(int sig) = 0;
  // SIGKILL to every rank now; `why` completes "ranks 1, 2 still running ...".
  virtual void kill_now(const std::string& why) = 0;
  // Already stopping (a rank failed, a stop came, or the time ran out).
  virtual bool stopping() const = 0;
};

// How an agent changes the supervision of its host's ranks: where output
// goes, who learns of exits, and descriptors of its own in the same poll
// loop. Without hooks the supervisor relays lines to kolorun's stdout/stderr.
class SupervisorHooks {
 public:
  virtual ~SupervisorHooks() = default;
  virtual std::unique_ptr<OutputSink> sink(int rank, int stream) = 0;  // stream 1 or 2
  virtual void on_exit(int rank, int how, int status) {}
  // Appends descriptors to poll; on_wake sees them after every wakeup.
  virtual void add_fds(std::vector<pollfd>& fds) {}
  virtual void on_wake(const pollfd* fds, std::size_t n, JobControl& job) {}
  // The loop wakes at least this often (ms), for timers; -1: no need.
  virtual int tick_ms() const { return -1; }
  // False while the agent's own output queue is full: ranks' pipes are not
  // read meanwhile, so a slow link slows the ranks instead of growing memory.
  virtual bool accept_output() const { return true; }
};

struct SupervisorOptions {
  bool tag_output = true;
  double timeout_s = 0;  // 0: none
  double grace_s = 3;
  std::string who = "kolorun";       // prefix of its messages
  bool report_failures = true;       // "rank 2 exited with code 7 (first failure)" etc.
  SupervisorHooks* hooks = nullptr;  // not owned
};

// Runs the job to its end and returns kolorun's exit code. Takes ownership of
// the ranks' pipes and of signal_fd (see signals.h).
int supervise(std::vector<RankProcess> ranks, int signal_fd, const SupervisorOptions& opts);

// Stops ranks already started when the job cannot start completely (a later
// rank failed to exec): SIGTERM, SIGKILL after the grace period, output
// relayed meanwhile. Returns exit_code.
int abort_started(std::vector<RankProcess> ranks, int signal_fd, const SupervisorOptions& opts,
                  int exit_code);

}  // namespace kolorun
