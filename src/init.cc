// kolo::init(): find out who we are, meet the other ranks at the rendezvous
// store, learn which of them share this host, and build the backend.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "collectives/backend.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/context.h"
#include "rendezvous/discovery.h"
#include "rendezvous/hosts.h"
#include "transport/nic.h"

namespace kolo {

Communicator init() {
  const rdv::Discovery d = rdv::discover(rdv::current_environment());
  // Under kolorun stdout is a pipe to the launcher's relay: flush by line so
  // that ranks' output (and progress bars) show up as it is written.
  if (d.source == "kolo" && !isatty(STDOUT_FILENO)) std::setvbuf(stdout, nullptr, _IOLBF, 0);
  set_log_rank(d.rank);
  auto ctx = std::make_shared<detail::Context>();
  ctx->rank = d.rank;
  ctx->size = d.size;
  if (d.size == 1) {
    ctx->backend = collectives::make_self_backend();
  } else {
    // Each init() of a job gets its own key space (all ranks call init() equally often).
    static int communicators = 0;
    const std::string prefix = fmt::format("kolo/comm{}", communicators++);
    ctx->prefix = prefix;
    ctx->store = rdv::connect_store(d, ctx->hosted_store);
    auto& store = *ctx->store;

    const rdv::HostMap hosts = rdv::map_hosts(store, prefix, d.job_id, d.rank, d.size, store.local_address());
    const int host = hosts.host_of[d.rank];
    const int local_size = static_cast<int>(hosts.ranks[host].size());
    int local_rank = 0;
    while (hosts.ranks[host][local_rank] != d.rank) ++local_rank;
    ctx->local_rank = local_rank;
    ctx->local_size = local_size;

    const bool one_host = hosts.hosts() == 1;
    int most_local = 0;
    for (const auto& r : hosts.ranks) most_local = std::max(most_local, static_cast<int>(r.size()));
    const std::string want = config::transport();
    enum { Shm, Tcp, Hier } kind = Tcp;
    if (want == "auto") {
      // One rank per host: the hierarchy would add nothing to the flat mesh.
      kind = one_host ? Shm : (config::hierarchical() && most_local > 1 ? Hier : Tcp);
    } else if (want == "shm") {
      if (!one_host)
        fail("KOLO_TRANSPORT=shm needs every rank on one host, but they are on {} hosts ({} of {} ranks on this one, {})",
             hosts.hosts(), local_size, d.size, hosts.names[host]);
      kind = Shm;
    } else if (want != "tcp") {
      fail("KOLO_TRANSPORT={} is not a transport (auto, shm, tcp)", want);
    }
    // Kept in the context: a collective every rank rejected rebuilds the
    // backend in a new key space (engine/context.h).
    std::string address;
    if (kind != Shm) address = transport::choose_address(hosts.routes, d.rank, hosts.names[host]);
    transport::Members members;
    if (!one_host)
      for (int q = 0; q < d.size; ++q) members.hosts.push_back(hosts.host_name_of(q));
    ctx->make_backend = [&store, kind, d, hosts, address, members](const std::string& space) {
      if (kind == Shm) return collectives::make_shm_backend(store, space, d.job_id, d.rank, d.size);
      if (kind == Hier) return collectives::make_hier_backend(store, space, d.job_id, d.rank, hosts, address);
      return collectives::make_tcp_backend(store, space, d.rank, d.size, address, members);
    };
    ctx->base_prefix = prefix;
    ctx->backend = ctx->make_backend(prefix);
    rdv::store_barrier(store, prefix + "/ready", d.rank, d.size);
    log(LogLevel::Info, "rank {} of {} on host {} ({} of {} hosts, {} local ranks), transport {}, launcher {}",
        d.rank, d.size, hosts.names[host], host + 1, hosts.hosts(), local_size, ctx->backend->name(), d.source);
  }
  Communicator comm;
  comm.ctx_ = std::move(ctx);
  return comm;
}

}  // namespace kolo
