// The hierarchical backend: ranks on several hosts (hier/algorithms.h).
#include <algorithm>

#include "collectives/backend.h"
#include "collectives/hier/algorithms.h"
#include "rendezvous/hosts.h"

namespace kolo::collectives {

namespace {

class HierBackend final : public Backend {
 public:
  HierBackend(rdv::StoreClient& store, const std::string& prefix, const std::string& job_id, int rank,
              const rdv::HostMap& hosts, const std::string& address,
              std::shared_ptr<const std::vector<int>> world) {
    Hier& h = h_;
    h.rank = rank;
    h.size = static_cast<int>(hosts.host_of.size());
    h.host = hosts.host_of[rank];
    h.hosts = hosts.hosts();
    h.host_ranks = hosts.ranks;
    const auto& mine = hosts.ranks[h.host];
    h.local_rank = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
    h.local_size = static_cast<int>(mine.size());
    h.shards = h.local_size;
    for (const auto& r : hosts.ranks) h.shards = std::min(h.shards, static_cast<int>(r.size()));
    h.host_major = true;
    for (int g = 0, next = 0; g < h.hosts; ++g)
      for (int q : hosts.ranks[g]) h.host_major &= q == next++;

    // Local group: peers are named by rank only (they share this host).
    h.local = std::make_unique<ShmGroup>(store, fmt::format("{}/host{}", prefix, h.host), job_id, h.local_rank,
                                         h.local_size, transport::Members{mine, {}, world});
    h.local->set_cpu_sharers(hosts.machine_ranks);
    if (h.local_rank < h.shards) {
      transport::Members cross{{}, {}, world};
      for (int g = 0; g < h.hosts; ++g) {
        cross.ranks.push_back(hosts.ranks[g][h.local_rank]);
        cross.hosts.push_back(hosts.names[g]);
      }
      h.cross = std::make_unique<TcpMesh>(store, fmt::format("{}/cross{}", prefix, h.local_rank), h.host, h.hosts,
                                          address, std::move(cross));
      // A rank blocked on its host link learns at once that a rank of its
      // own host failed (e.g. on another link), instead of at its own timeout.
      h.cross->set_watch([this](const char* what) {
        if (!h_.pipelining) h_.local->check_peers(what);
      });
    }
    transport::Members everyone{{}, {}, world};
    for (int q = 0; q < h.size; ++q) {
      everyone.ranks.push_back(q);
      everyone.hosts.push_back(hosts.host_name_of(q));
    }
    h.make_flat = [this, &store, prefix, address, everyone] {
      auto mesh = std::make_unique<TcpMesh>(store, prefix + "/flat", h_.rank, h_.size, address, everyone);
      mesh->set_watch([this](const char* what) { h_.local->check_peers(what); });
      mesh->begin(current_);
      return mesh;
    };
  }

  const char* name() const override { return "hier"; }
  void begin(const Fingerprint& fp) override {
    current_ = fp;
    h_.local->begin(fp);
    if (h_.cross) h_.cross->begin(fp);
    if (h_.flat) h_.flat->begin(fp);
  }
  void abort(const std::string& reason) override {
    h_.local->abort(reason);
    if (h_.cross) h_.cross->abort();
    if (h_.flat) h_.flat->abort();
  }
  void check_peers(const char* what) override {
    h_.local->check_peers(what);
    if (h_.cross) h_.cross->check_peers(what);
    if (h_.flat) h_.flat->check_peers(what);
  }

  void allreduce(const void* in, void* out, std::size_t count, DType t, Op op) override {
    hier_allreduce(h_, in, out, count, t, op);
  }
  void broadcast(void* data, std::size_t count, DType t, int root) override {
    hier_broadcast(h_, data, count, t, root);
  }
  void allgatherv(const void* in, void* out, std::span<const std::size_t> counts, DType t) override {
    hier_allgatherv(h_, in, out, counts, t);
  }
  void reduce_scatter(const void* in, void* out, std::size_t count, DType t, Op op) override {
    hier_reduce_scatter(h_, in, out, count, t, op);
  }
  void alltoallv(const void* in, void* out, const AlltoallvLayout& l, DType t) override {
    hier_alltoallv(h_, in, out, l, t);
  }
  void barrier() override { hier_barrier(h_); }

 private:
  Hier h_;
  Fingerprint current_;
};

}  // namespace

std::unique_ptr<Backend> make_hier_backend(rdv::StoreClient& store, const std::string& prefix,
                                           const std::string& job_id, int rank, const rdv::HostMap& hosts,
                                           const std::string& address,
                                           std::shared_ptr<const std::vector<int>> world) {
  return std::make_unique<HierBackend>(store, prefix, job_id, rank, hosts, address, std::move(world));
}

}  // namespace kolo::collectives
