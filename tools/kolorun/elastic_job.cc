#include "elastic_job.h"

#include <unistd.h>

#include <fmt/format.h>

#include <climits>
#include <cstdlib>
#include <cmath>
#include <memory>

#include "elastic_driver.h"
#include "net/address.h"
#include "host_discovery.h"
#include "job_store.h"
#include "launch_hosts.h"
#include "rank_env.h"
#include "remote_shell.h"
#include "say.h"
#include "shm_sweep.h"
#include "signals.h"
#include "core/config.h"
#include "net/auth.h"

namespace kolorun {

namespace {
constexpr std::int64_t kElasticPeerMs = 5000;
}  // namespace

int run_elastic(const Options& o) {
  std::vector<HostSlots> first = o.hosts;
  if (!o.discovery_script.empty()) {
    Discovered d = discover_hosts(o.discovery_script, o.slots_per_host);
    if (!d.ok) {
      say(fmt::format("{} (its first run must succeed); nothing was started", d.error));
      return 1;
    }
    first = std::move(d.hosts);
  } else if (first.empty()) {
    first.push_back({"localhost", o.np});
  }

  // An elastic job re-forms instead of stopping, so it wants a lost host known
  // soon: the workers' peer timeout is 5 s unless set (KOLO_PEER_TIMEOUT_MS),
  // and kolorun declares a silent host lost 1 s after it (--host-timeout).
  const bool peer_set = kolo::config::is_set("KOLO_PEER_TIMEOUT_MS");
  double silence_s = 0;
  std::string first_remote;
  try {
    const std::int64_t peer_ms = peer_set ? kolo::config::peer_timeout_ms() : kElasticPeerMs;
    silence_s = o.host_timeout_s > 0 ? o.host_timeout_s : (peer_ms > 0 ? static_cast<double>(peer_ms) / 1000 : 5.0) + 1;
  } catch (const std::exception& e) {
    say(e.what());
    return 2;
  }
  for (const auto& h : first) {
    if (first_remote.empty() && !kolo::net::is_local_host(h.name)) first_remote = h.name;
  }
  const auto net = job_network(o, first_remote, silence_s);
  if (!net) return 2;
  const std::string& bind = net->bind;

  block_job_signals();  // before the store's thread exists, see signals.h
  const int signal_fd = open_signal_fd();
  std::unique_ptr<kolo::rdv::StoreServer> server;
  std::unique_ptr<kolo::rdv::StoreClient> client;
  JobIdentity job;
  try {
    server = start_job_store(bind, net->advertise, job);
    client = std::make_unique<kolo::rdv::StoreClient>(bind == "0.0.0.0" ? "127.0.0.1" : bind, server->port(),
                                                      kolo::rdv::Millis(10000),
                                                      kolo::auth::Key::from_secret(job.secret));
  } catch (const std::exception& e) {
    say(fmt::format("cannot start the rendezvous store on {}: {}", bind, e.what()));
    ::close(signal_fd);
    return 1;
  }
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) {
    say("cannot read the working directory");
    ::close(signal_fd);
    return 1;
  }
  const AgentBase base{net->rsh, self_path(), cwd, silence_s};
  const bool loopback_store = bind == "127.0.0.1";
  auto launch = [&](const std::string& host, const std::vector<ElasticWorker>& workers) {
    HostRanks h{host, kolo::net::is_local_host(host), {}};
    if (!h.local && loopback_store)
      throw std::runtime_error(fmt::format(
          "the store listens on 127.0.0.1 only (the discovery script's first list named only this host), so {} "
          "could not reach it; give --network-interface NAME|CIDR",
          host));
    std::vector<RankEnv> ranks;
    for (const auto& w : workers) {
      h.ranks.push_back(w.number);
      ranks.push_back({w.number, elastic_variables(w.id, job, o.network_interface, o.elastic_timeout_s)});
      if (!peer_set) ranks.back().env.push_back(fmt::format("KOLO_PEER_TIMEOUT_MS={}", kElasticPeerMs));
    }
    return agent_launch(o, base, h, std::move(ranks));
  };

  ElasticOptions eo;
  eo.np = o.np;
  eo.min_np = o.min_np;
  eo.max_np = o.max_np;
  eo.slots_per_host = o.slots_per_host;
  eo.timeout_s = o.elastic_timeout_s;
  eo.join_timeout_s = o.join_timeout_s;
  eo.script = o.discovery_script;
  eo.fixed = first;
  ElasticDriver driver(eo, first, launch, std::move(client));

  HostJobOptions hj;
  hj.tag_output = o.tag_output;
  hj.timeout_s = o.timeout_s;
  hj.grace_s = o.grace_s;
  hj.silence_s = silence_s;
  hj.elastic = &driver;
  const int code = run_host_job({}, signal_fd, hj);
  if (int n = sweep_shm(job.job_id); n > 0)
    say(fmt::format("removed {} shared-memory segment{} the ranks left behind", n, n == 1 ? "" : "s"));
  return code;
}

}  // namespace kolorun
