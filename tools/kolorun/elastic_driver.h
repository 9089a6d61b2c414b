// The driver of an elastic job (kolorun --min-np/--max-np/--host-discovery-
// script): which hosts run workers, and which workers form each generation
// of the job's communicator (src/rendezvous/elastic.h has the store keys).
//
// Hosts. The discovery script (host_discovery.h; or the fixed -H/--hostfile
// list) is read every second. A listed host that runs nothing gets workers,
// up to its slots and --max-np in all, one agent per host as in any multi-host
// job. A host that stops being listed has its workers stopped. A host fails
// when one of its workers exits non-zero or by a signal, or when it is lost
// (its agent's connection ends or falls silent): its other workers are
// stopped and the host is blacklisted — not used again until the discovery
// script has stopped listing it and lists it again (it was replaced or
// repaired), so a host that keeps failing is not restarted in a loop.
//
// Generations. Each worker has a number for life (its output is tagged with
// it) and an id, "<host>.<number>". A generation lists the live workers that
// have reached init() (elastic::ready), hosts in the order they were first
// listed, then by number; its rank order. A new one is published when a
// member is lost (at once: the survivors are waiting) or when workers were
// added and all of them have reached init() (--join-timeout at most, 30 s by
// default, so one that never does holds nobody up). Fewer than --min-np live workers: nothing
// is published and the job waits up to --elastic-timeout for hosts, then ends
// with exit 1 naming what is left.
//
// The end. The first worker that exits 0 starts the end of the job: no more
// generations, no new hosts, and hosts whose workers never formed a
// communicator (added too late) are stopped; the job exits 0 when every other
// worker has exited 0 too, with the first failure's code otherwise.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "host_job.h"
#include "hosts.h"
#include "rendezvous/store.h"

namespace kolorun {

struct ElasticOptions {
  int np = 0;                   // workers to start with (fewer when fewer slots are listed)
  int min_np = 1;
  int max_np = 0;               // 0: no limit
  int slots_per_host = 1;
  double timeout_s = 600;       // --elastic-timeout
  double join_timeout_s = 30;   // --join-timeout
  std::string script;           // empty: `fixed` is the host list
  std::vector<HostSlots> fixed;
};

struct ElasticWorker {
  int number = 0;
  std::string id;
};

class ElasticDriver : public HostJobHooks {
 public:
  // `launch` makes the agent launch of a host running these workers.
  using Launch = std::function<AgentLaunch(const std::string& host, const std::vector<ElasticWorker>& workers)>;
  ElasticDriver(ElasticOptions o, std::vector<HostSlots> first_hosts, Launch launch,
                std::unique_ptr<kolo::rdv::StoreClient> store);

  void rank_exited(int rank, const std::string& host, int how, int status) override;
  void host_lost(const std::string& host, const std::vector<int>& ranks, const std::string& why) override;
  void tick(HostJobControl& job) override;
  bool finished() const override;

 private:
  using Clock = std::chrono::steady_clock;
  enum class State { Starting, Member, Ended, Lost };
  struct Worker {
    int number;
    std::string id, host;
    State state = State::Starting;
    Clock::time_point started;
  };
  struct Host {
    int slots = 0;
    int order = 0;          // first listing: the rank order of hosts
    bool listed = false;
    bool running = false;   // its agent runs workers
    bool blacklisted = false;
    bool drop = false;      // stop its agent at the next tick
  };

  void rediscover();
  void apply(const std::vector<HostSlots>& listed);
  void start_hosts(HostJobControl& job);
  void publish_if_changed(HostJobControl& job);
  void fail_host(const std::string& host, const std::string& what);
  // Marks the live workers of `host` lost and returns their numbers.
  std::vector<int> lose_workers(const std::string& host);
  // The job is ending: hosts whose workers never formed a communicator (added
  // too late for the others to re-form with them) are stopped.
  void stop_latecomers(HostJobControl& job);
  int live() const;

  ElasticOptions o_;
  Launch launch_;
  std::unique_ptr<kolo::rdv::StoreClient> store_;
  std::map<std::string, Host> hosts_;
  int next_order_ = 0;
  std::vector<Worker> workers_;  // index = number
  std::vector<int> members_;     // numbers of the latest generation, rank order
  int generation_ = -1;
  bool lost_member_ = false;     // a member is gone since the latest generation
  bool ending_ = false;          // a worker exited 0
  std::optional<int> end_code_;  // first failure after that
  std::string end_text_;
  std::optional<Clock::time_point> below_min_since_;
  Clock::time_point next_discovery_;
  std::string last_discovery_error_;
};

}  // namespace kolorun
