// Supervision of a multi-host job from the launching kolorun: one agent per
// host (agent.h), over ssh or, for the launching host, as a child process.
//
// The loop reads each agent's frames (agent_protocol.h) and stderr, relays
// the ranks' lines tagged "[r] " (or into --output-dir on this host), and
// stops the whole job on the first failure (the policy: teardown_policy.h):
//   - a rank that exits non-zero or by a signal: "rank 3 on hostB exited with
//     code 7 (first failure)"; kolorun exits with that code (128+signal);
//   - a host lost: its agent's connection closed before its ranks ended (the
//     agent or the host died, ssh failed), or no frame came from it for the
//     silence limit (its link is down): "lost host hostB (ranks 2, 3): ...";
//     exit code 1;
//   - an agent that could not start its ranks (missing program, no such
//     working directory): its message, exit 2 for exec errors, else 1;
//   - SIGINT/SIGTERM/SIGHUP to kolorun (forwarded to every rank on every
//     host, exit 128+signal) and --timeout (exit 124).
// Stopping sends every agent a stop frame: its ranks get SIGTERM (or the
// signal kolorun got) and SIGKILL after the grace period, from the agent.
// An agent still running 10 s after that has its connection killed, which
// makes it SIGKILL its ranks. Heartbeats go both ways every second.
#pragma once

#include <string>
#include <vector>

#include "agent_protocol.h"
#include "hosts.h"
#include "spawn.h"

namespace kolorun {

struct AgentLaunch {
  HostRanks host;
  std::string path;               // the program: ssh (or --rsh's), or this kolorun
  std::vector<std::string> argv;
  JobSpec job;                    // sent as the 'J' frame, first
};

// What an elastic job's driver (elastic_driver.h) may do to a running job.
class HostJobControl {
 public:
  virtual ~HostJobControl() = default;
  // Starts a host's agent; its ranks' numbers must be new to the job.
  virtual void add_host(const AgentLaunch& l) = 0;
  // Ends a host's agent (which SIGKILLs its ranks) without failing the job.
  virtual void drop_host(const std::string& name) = 0;
  // Fails the job: says `text`, stops every rank, exits with `code`.
  virtual void end(int code, const std::string& text) = 0;
};

// An elastic job: ranks (workers) that end and hosts that are lost are
// reported here instead of failing the job; the driver decides.
class HostJobHooks {
 public:
  virtual ~HostJobHooks() = default;
  // how/status: CLD_EXITED and the code, or CLD_KILLED/CLD_DUMPED and the signal.
  virtual void rank_exited(int rank, const std::string& host, int how, int status) = 0;
  // `ranks`: those still running there, now gone with it.
  virtual void host_lost(const std::string& host, const std::vector<int>& ranks, const std::string& why) = 0;
  // After every wakeup of the job's loop (at least every 250 ms).
  virtual void tick(HostJobControl& job) = 0;
  // Nothing more to start or wait for: the job ends when its agents have.
  virtual bool finished() const = 0;
};

struct HostJobOptions {
  bool tag_output = true;
  double timeout_s = 0;
  double grace_s = 3;
  double silence_s = 15;   // a host silent this long is lost
  std::vector<int> files;  // --output-dir: 2 per rank (stdout, stderr), owned; empty: relay
  int np = 0;
  HostJobHooks* elastic = nullptr;  // not owned; set: an elastic job (np: ranks of the first hosts)
};

// Starts the agents, runs the job to its end and returns kolorun's exit
// code. Takes ownership of signal_fd (see signals.h). When one agent has
// job.choose_master (agent_protocol.h), the others' jobs are sent once it has
// reported MASTER_ADDR and MASTER_PORT, with both added to their ranks'
// variables; an agent that reports nothing within the silence limit after
// its hello fails the job.
int run_host_job(const std::vector<AgentLaunch>& agents, int signal_fd, const HostJobOptions& opts);

}  // namespace kolorun
