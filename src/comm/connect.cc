#include "comm/connect.h"

#include <algorithm>
#include <string>

#include "collectives/backend.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "rendezvous/hosts.h"
#include "rendezvous/settings_check.h"
#include "net/nic.h"
#include "transport/gpu.h"

namespace kolo::detail {

namespace {

// The data plane collectives on CUDA memory will take (made at the first of
// them, transport/gpu.h), for the line that reports the transport: a setting
// that cannot serve this communicator is said here, and is an error at that
// first collective.
std::string planned_gpu_plane(int size, bool one_host) {
  if (!gpu::built()) return "none (built without CUDA)";
  try {
    return gpu::planned_plane(size, one_host);
  } catch (const Error& e) {
    std::string why = e.what();
    if (why.rfind(rank_prefix(), 0) == 0) why.erase(0, rank_prefix().size());  // the line names the rank already
    return fmt::format("refused ({})", why);
  }
}

}  // namespace

void connect(Context& c) {
  auto& store = *c.store;
  const std::string& prefix = c.prefix;
  const rdv::HostMap hosts = rdv::map_hosts(store, prefix, c.job_id, c.rank, c.size, store.local_address());
  const int host = hosts.host_of[c.rank];
  const auto& mine = hosts.ranks[host];
  c.local_rank = static_cast<int>(std::find(mine.begin(), mine.end(), c.rank) - mine.begin());
  c.local_size = static_cast<int>(mine.size());
  c.cross_rank = host;
  c.cross_size = hosts.hosts();
  // The world's ranks compare their job-wide settings; a subgroup's ranks
  // are ranks of a world that already agreed.
  if (!c.parent) rdv::check_settings_agree(store, prefix, c.rank, c.size, hosts);

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
           hosts.hosts(), c.local_size, c.size, hosts.names[host]);
    kind = Shm;
  } else if (want != "tcp") {
    fail("KOLO_TRANSPORT={} is not a transport (auto, shm, tcp)", want);
  }
  // Kept in the context: a collective every rank rejected rebuilds the
  // backend in a new key space (comm/context.h).
  std::string address;
  if (kind != Shm) address = net::choose_address(hosts.routes, c.rank, hosts.names[host]);
  transport::Members members{{}, {}, c.world};
  if (!one_host && kind == Tcp)
    for (int q = 0; q < c.size; ++q) members.hosts.push_back(hosts.host_name_of(q));
  c.make_backend = [kind, job = c.job_id, rank = c.rank, size = c.size, hosts, address,
                    members](rdv::StoreClient& store, const std::string& space) {
    if (kind == Shm) return collectives::make_shm_backend(store, space, job, rank, size, members);
    if (kind == Hier) return collectives::make_hier_backend(store, space, job, rank, hosts, address, members.world);
    return collectives::make_tcp_backend(store, space, rank, size, address, members);
  };
  c.base_prefix = prefix;
  c.backend = c.make_backend(store, prefix);
  rdv::store_barrier(store, prefix + "/ready", c.rank, c.size);
  if (log_enabled(LogLevel::Info))  // planning may load NCCL: not for a line nobody reads
    log(LogLevel::Info, "{}{} of {} on host {} ({} of {} hosts, {} local ranks), transport {}, CUDA memory {}, launcher {}",
        c.world ? "subgroup " : "", c.name(c.rank), c.size, hosts.names[host], host + 1, hosts.hosts(),
        c.local_size, c.backend->name(), planned_gpu_plane(c.size, one_host), c.launcher);
}

}  // namespace kolo::detail

namespace kolo {

// kolo.h.
std::string iface_address() { return net::iface_address(rdv::host_name()); }

}  // namespace kolo
