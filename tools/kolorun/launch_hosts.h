// A multi-host job from the launching kolorun (-H / --hostfile): place the
// ranks, check every remote host, start the store where all hosts reach it,
// start one agent per host and supervise them (host_job.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent_protocol.h"
#include "host_job.h"
#include "options.h"
#include "remote_shell.h"

namespace kolorun {

// What the agent launches of one job share.
struct AgentBase {
  RemoteShell rsh;
  std::string self;      // this kolorun's absolute path (the agent is the same program)
  std::string cwd;       // the ranks' working directory, on every host
  double silence_s = 15;  // kolorun's limit for a silent host (the agent's is 2 s longer)
};

// How long a silent host is given: --host-timeout, else longer than the
// ranks' own peer timeout, so that when a link goes down the ranks report the
// lost peers themselves (naming them) before kolorun declares the host lost.
double host_timeout_s(const Options& o);
// The agent of host `h` running `ranks` (the job's command, -x variables and
// kolo settings from `o`).
AgentLaunch agent_launch(const Options& o, const AgentBase& base, const HostRanks& h, std::vector<RankEnv> ranks);
std::string self_path();

// The ssh command and where the store listens: on --network-interface, else
// on all addresses, advertised at the one that routes to `first_remote`
// (empty: no remote host; 127.0.0.1). Says what is wrong and returns nothing
// on a bad --rsh or an address that cannot be chosen (kolorun exits 2).
struct JobNetwork {
  RemoteShell rsh;
  std::string advertise = "127.0.0.1", bind = "127.0.0.1";
};
std::optional<JobNetwork> job_network(const Options& o, const std::string& first_remote, double silence_s);

// Returns kolorun's exit code: 2 for usage errors found now (a command
// missing here, a bad --rsh or --network-interface), 1 when a host cannot be
// reached (nothing started), else the job's code (host_job.h).
int run_hosts(const Options& o);

}  // namespace kolorun
