#include "launch_hosts.h"

#include <unistd.h>

#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "agent.h"
#include "agent_protocol.h"
#include "net/address.h"
#include "host_job.h"
#include "output_files.h"
#include "rank_env.h"
#include "say.h"
#include "remote_shell.h"
#include "job_store.h"
#include "shm_sweep.h"
#include "signals.h"
#include "spawn.h"
#include "torchrun_env.h"
#include "core/config.h"

namespace kolorun {

double host_timeout_s(const Options& o) {
  if (o.host_timeout_s > 0) return o.host_timeout_s;
  // 0 turns the ranks' own limit off; the host limit stays at the default's.
  const std::int64_t peer_ms = kolo::config::peer_timeout_ms();
  return (peer_ms > 0 ? static_cast<double>(peer_ms) : 10000.0) / 1000 + 5;
}

AgentLaunch agent_launch(const Options& o, const AgentBase& base, const HostRanks& h, std::vector<RankEnv> ranks) {
  JobSpec spec;
  spec.host = h.name;
  spec.cwd = base.cwd;
  spec.argv = o.command;
  spec.env = kolo_settings();  // job-wide; -x after them, so an explicit -x wins
  spec.env.insert(spec.env.end(), o.env.begin(), o.env.end());
  spec.grace_s = o.grace_s;
  // The agent waits longer than kolorun does: kolorun names the lost host
  // first, then the agent (if only its link was cut) ends its ranks.
  spec.silence_ms = static_cast<std::uint32_t>(base.silence_s * 1000) + 2000;
  spec.ranks = std::move(ranks);
  AgentLaunch l;
  l.host = h;
  l.job = std::move(spec);
  if (h.local) {
    l.path = base.self;
    l.argv = {base.self, kAgentFlag};
  } else {
    l.path = resolve_executable(base.rsh.words.front());
    l.argv = base.rsh.argv(h.name, "exec " + shell_quote(base.self) + " " + kAgentFlag);
  }
  return l;
}

std::optional<JobNetwork> job_network(const Options& o, const std::string& first_remote, double silence_s) {
  JobNetwork n;
  try {
    n.rsh = make_remote_shell(o.rsh, o.ssh_port, o.identity, std::max(1, static_cast<int>(std::ceil(silence_s / 3))));
    if (!o.network_interface.empty() || !first_remote.empty()) {
      n.advertise = reachable_address(o.network_interface, first_remote);
      // Without an interface named, the other hosts may route to another of
      // this host's addresses.
      n.bind = o.network_interface.empty() ? "0.0.0.0" : n.advertise;
    }
  } catch (const kolo::net::AddressError& e) {
    say(fmt::format("{}; choose the store's address with --network-interface NAME|CIDR", e.what()));
    return std::nullopt;
  } catch (const std::exception& e) {
    say(e.what());
    return std::nullopt;
  }
  return n;
}

std::string self_path() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find kolorun's own path: " + ec.message());
  return p.string();
}

int run_hosts(const Options& o) {
  const std::vector<HostRanks> hosts = place_ranks(o.hosts, o.np, kolo::net::is_local_host);
  const HostRanks* first_remote = nullptr;
  bool any_local = false;
  for (const auto& h : hosts) {
    if (h.local) any_local = true;
    else if (first_remote == nullptr) first_remote = &h;
  }
  // The command is checked here only when ranks run here: a launching host
  // without the program may still start it on the others.
  if (any_local) {
    try {
      resolve_executable(o.command.front());
    } catch (const ExecError& e) {
      say(e.what());
      return 2;
    }
  }
  double silence_s = 0;
  try {
    silence_s = host_timeout_s(o);  // a KOLO_PEER_TIMEOUT_MS that is no integer is an error
  } catch (const std::exception& e) {
    say(e.what());
    return 2;
  }
  const auto net = job_network(o, first_remote != nullptr ? first_remote->name : "", silence_s);
  if (!net) return 2;
  const RemoteShell& rsh = net->rsh;
  const std::string &advertise = net->advertise, &bind = net->bind;

  // Every remote host answers before anything starts, checked all at once.
  std::vector<std::string> remote;
  for (const auto& h : hosts) {
    if (!h.local) remote.push_back(h.name);
  }
  if (!remote.empty()) {
    const auto errors = check_hosts(rsh, remote, 30);
    for (const auto& e : errors) say(e);
    if (!errors.empty()) {
      say(fmt::format("nothing was started ({} of {} hosts unreachable)", errors.size(), remote.size()));
      return 1;
    }
  }

  HostJobOptions hj;
  hj.tag_output = o.tag_output;
  hj.timeout_s = o.timeout_s;
  hj.grace_s = o.grace_s;
  hj.silence_s = silence_s;
  hj.np = o.np;
  if (o.output_dir && !open_output_files(*o.output_dir, o.np, hj.files)) return 2;

  block_job_signals();  // before the store's thread exists, see signals.h
  const int signal_fd = open_signal_fd();
  std::unique_ptr<kolo::rdv::StoreServer> store;
  JobIdentity job;
  try {
    store = start_job_store(bind, advertise, job);
  } catch (const std::exception& e) {
    say(fmt::format("cannot start the rendezvous store on {}: {}", bind, e.what()));
    return 1;
  }

  const std::string self = self_path();
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) {
    say("cannot read the working directory");
    return 1;
  }
  const AgentBase base{rsh, self, cwd, silence_s};
  std::vector<AgentLaunch> launches;
  const int nhosts = static_cast<int>(hosts.size());
  for (int host = 0; host < nhosts; ++host) {
    const HostRanks& h = hosts[host];
    std::vector<RankEnv> ranks;
    const int local_size = static_cast<int>(h.ranks.size());
    for (int i = 0; i < local_size; ++i) {
      const int rank = h.ranks[i];
      RankEnv r{rank, kolo_variables(rank, o.np, i, local_size, job, o.network_interface)};
      const auto torchrun = torchrun_variables({rank, o.np, i, local_size, host, nhosts}, job.job_id);
      r.env.insert(r.env.end(), torchrun.begin(), torchrun.end());
      ranks.push_back(std::move(r));
    }
    AgentLaunch l = agent_launch(o, base, h, std::move(ranks));
    if (h.ranks.front() == 0) {
      // torchrun's MASTER_ADDR: loopback when the job has one host, else the
      // address of this host that the others reach (host_job.h).
      l.job.choose_master = true;
      l.job.master_iface = nhosts == 1 ? "" : o.network_interface;
      l.job.master_peer = nhosts == 1 ? "127.0.0.1" : advertise;
    }
    launches.push_back(std::move(l));
  }
  const int code = run_host_job(launches, signal_fd, hj);
  if (any_local) {
    if (int n = sweep_shm(job.job_id); n > 0)
      say(fmt::format("removed {} shared-memory segment{} the ranks left behind", n, n == 1 ? "" : "s"));
  }
  return code;
}

}  // namespace kolorun
