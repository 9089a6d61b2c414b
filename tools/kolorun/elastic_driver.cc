#include "elastic_driver.h"

#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "host_discovery.h"
#include "rendezvous/elastic.h"
#include "say.h"
#include "teardown_policy.h"

namespace kolorun {

namespace {

constexpr auto kDiscoveryInterval = std::chrono::seconds(1);

std::string numbers(const std::vector<int>& ns) {
  std::string s;
  for (std::size_t i = 0; i < ns.size(); ++i) s += fmt::format("{}{}", i == 0 ? "" : ", ", ns[i]);
  return s;
}

}  // namespace

ElasticDriver::ElasticDriver(ElasticOptions o, std::vector<HostSlots> first_hosts, Launch launch,
                             std::unique_ptr<kolo::rdv::StoreClient> store)
    : o_(std::move(o)), launch_(std::move(launch)), store_(std::move(store)) {
  apply(first_hosts);
  next_discovery_ = Clock::now() + kDiscoveryInterval;
}

int ElasticDriver::live() const {
  int n = 0;
  for (const auto& w : workers_) n += (w.state == State::Starting || w.state == State::Member) ? 1 : 0;
  return n;
}

void ElasticDriver::rediscover() {
  std::vector<HostSlots> listed = o_.fixed;
  if (!o_.script.empty()) {
    Discovered d = discover_hosts(o_.script, o_.slots_per_host);
    if (!d.ok) {
      if (d.error != last_discovery_error_) say(fmt::format("elastic: {} (keeping the hosts it listed last)", d.error));
      last_discovery_error_ = d.error;
      return;
    }
    last_discovery_error_.clear();
    listed = std::move(d.hosts);
  }
  apply(listed);
}

void ElasticDriver::apply(const std::vector<HostSlots>& listed) {
  for (auto& [name, h] : hosts_) {
    const bool still = std::any_of(listed.begin(), listed.end(), [&](const HostSlots& l) { return l.name == name; });
    if (still || !h.listed) continue;
    h.listed = false;
    h.blacklisted = false;  // listed again later: replaced or repaired
    if (!h.running) continue;
    const std::vector<int> stopped = lose_workers(name);
    h.drop = true;
    say(fmt::format("elastic: host {} is no longer listed: stopping its workers {}", name, numbers(stopped)));
  }
  for (const auto& l : listed) {
    auto [it, added] = hosts_.try_emplace(l.name);
    if (added) it->second.order = next_order_++;
    it->second.listed = true;
    it->second.slots = l.slots;
  }
}

void ElasticDriver::start_hosts(HostJobControl& job) {
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [name, h] : hosts_) order.emplace_back(h.order, name);
  std::sort(order.begin(), order.end());
  // Before the first generation: -np workers; after it, up to --max-np.
  const int most = o_.max_np > 0 ? o_.max_np : INT_MAX;
  const int cap = generation_ < 0 && o_.np > 0 ? std::min(o_.np, most) : most;
  int active = live();
  for (const auto& [_, name] : order) {
    Host& h = hosts_[name];
    if (!h.listed || h.running || h.blacklisted || h.drop || active >= cap) continue;
    const int n = std::min(h.slots, cap - active);
    std::vector<ElasticWorker> ws;
    for (int i = 0; i < n; ++i) {
      const int number = static_cast<int>(workers_.size());
      workers_.push_back({number, fmt::format("{}.{}", name, number), name, State::Starting, Clock::now()});
      ws.push_back({number, workers_.back().id});
    }
    h.running = true;
    active += n;
    try {
      job.add_host(launch_(name, ws));
    } catch (const std::exception& e) {
      for (const auto& w : ws) workers_[w.number].state = State::Lost;
      h.running = false;
      h.blacklisted = true;
      say(fmt::format("elastic: cannot start the agent for {}: {}; host blacklisted", name, e.what()));
    }
  }
}

void ElasticDriver::publish_if_changed(HostJobControl& job) {
  const auto now = Clock::now();
  std::vector<int> want;
  bool on_their_way = false;  // new workers not at init() yet, within the window
  int could_join = 0;
  for (auto& w : workers_) {
    if (w.state == State::Member) {
      want.push_back(w.number);
    } else if (w.state == State::Starting) {
      if (kolo::rdv::elastic::ready(*store_, w.id)) {
        want.push_back(w.number);
      } else if (now - w.started < std::chrono::duration<double>(o_.join_timeout_s)) {
        on_their_way = true;
        ++could_join;
      }
    }
  }
  const int possible = static_cast<int>(want.size()) + could_join;
  if (possible < o_.min_np) {
    if (!below_min_since_) {
      below_min_since_ = now;
      say(fmt::format("elastic: {} live worker{}, fewer than --min-np {}: waiting up to {:g} s for hosts", possible,
                      possible == 1 ? "" : "s", o_.min_np, o_.timeout_s));
    } else if (now - *below_min_since_ > std::chrono::duration<double>(o_.timeout_s)) {
      below_min_since_.reset();
      job.end(1, fmt::format("elastic: only {} live worker{} for {:g} s, fewer than --min-np {}", possible,
                             possible == 1 ? "" : "s", o_.timeout_s, o_.min_np));
    }
    return;
  }
  below_min_since_.reset();
  std::vector<int> sorted_members = members_;
  std::sort(sorted_members.begin(), sorted_members.end());
  std::sort(want.begin(), want.end());
  if (want == sorted_members) return;
  // A lost member: at once (the survivors wait). Only additions: when every
  // new worker is there, so that the running ones re-form once.
  if (static_cast<int>(want.size()) < o_.min_np || (!lost_member_ && on_their_way)) return;
  std::stable_sort(want.begin(), want.end(), [this](int a, int b) {
    return hosts_[workers_[a].host].order < hosts_[workers_[b].host].order;
  });
  std::vector<kolo::rdv::elastic::Member> members;
  std::string summary;
  std::string last_host;
  for (int n : want) {
    Worker& w = workers_[n];
    w.state = State::Member;
    members.push_back({w.id, w.host});
    summary += w.host == last_host ? fmt::format(", {}", n) : fmt::format("{}{}: {}", summary.empty() ? "" : "; ", w.host, n);
    last_host = w.host;
  }
  try {
    generation_ = kolo::rdv::elastic::publish(*store_, generation_ + 1, members);
  } catch (const std::exception& e) {
    job.end(1, fmt::format("elastic: cannot publish generation {}: {}", generation_ + 1, e.what()));
    return;
  }
  members_ = want;
  lost_member_ = false;
  say(fmt::format("elastic: generation {}: {} worker{} ({})", generation_, want.size(), want.size() == 1 ? "" : "s",
                  summary));
}

std::vector<int> ElasticDriver::lose_workers(const std::string& host) {
  std::vector<int> lost;
  for (auto& w : workers_) {
    if (w.host != host || (w.state != State::Starting && w.state != State::Member)) continue;
    if (w.state == State::Member) lost_member_ = true;
    w.state = State::Lost;
    lost.push_back(w.number);
  }
  return lost;
}

void ElasticDriver::fail_host(const std::string& host, const std::string& what) {
  Host& h = hosts_[host];
  const std::vector<int> others = lose_workers(host);
  const bool was_running = h.running;
  h.blacklisted = true;
  if (was_running && !others.empty()) h.drop = true;
  else h.running = false;
  say(fmt::format("elastic: {}; host {} blacklisted until the discovery script lists it anew{}", what, host,
                  others.empty() ? "" : fmt::format(", stopping its workers {}", numbers(others))));
}

void ElasticDriver::rank_exited(int rank, const std::string& host, int how, int status) {
  if (rank < 0 || rank >= static_cast<int>(workers_.size())) return;
  Worker& w = workers_[rank];
  if (w.state == State::Ended || w.state == State::Lost) return;
  if (how == CLD_EXITED && status == 0) {
    w.state = State::Ended;
    if (!ending_) say(fmt::format("elastic: worker {} on {} finished; the job ends when the others do", rank, host));
    ending_ = true;
    return;
  }
  if (w.state == State::Member) lost_member_ = true;
  w.state = State::Lost;
  const ChildEnd end{how, status};
  const std::string what = end.text();
  if (ending_) {
    if (!end_code_) {
      end_code_ = end.exit_code();
      end_text_ = fmt::format("worker {} on {} {} after another finished", rank, host, what);
    }
    return;
  }
  fail_host(host, fmt::format("worker {} on {} {}", rank, host, what));
}

void ElasticDriver::host_lost(const std::string& host, const std::vector<int>& ranks, const std::string& why) {
  for (int r : ranks) {
    if (r < 0 || r >= static_cast<int>(workers_.size())) continue;
    if (workers_[r].state == State::Member) lost_member_ = true;
    if (workers_[r].state == State::Starting || workers_[r].state == State::Member) workers_[r].state = State::Lost;
  }
  hosts_[host].running = false;
  if (ending_ && !end_code_) {
    end_code_ = 1;
    end_text_ = fmt::format("lost host {} (workers {}): {}", host, numbers(ranks), why);
    return;
  }
  fail_host(host, fmt::format("lost host {} (workers {}): {}", host, numbers(ranks), why));
}

void ElasticDriver::tick(HostJobControl& job) {
  if (!ending_ && Clock::now() >= next_discovery_) {
    rediscover();
    next_discovery_ = Clock::now() + kDiscoveryInterval;
  }
  for (auto& [name, h] : hosts_) {
    if (!h.drop) continue;
    job.drop_host(name);
    h.drop = false;
    h.running = false;
  }
  if (end_code_) {
    const int code = *end_code_;
    end_code_.reset();
    job.end(code, end_text_);
    return;
  }
  if (ending_) {
    stop_latecomers(job);
    return;
  }
  start_hosts(job);
  publish_if_changed(job);
}

void ElasticDriver::stop_latecomers(HostJobControl& job) {
  for (auto& [name, h] : hosts_) {
    if (!h.running) continue;
    std::vector<int> late;
    bool any_formed = false;
    for (auto& w : workers_) {
      if (w.host != name || (w.state != State::Starting && w.state != State::Member)) continue;
      if (kolo::rdv::elastic::has_formed(*store_, w.id)) any_formed = true;
      else late.push_back(w.number);
    }
    if (late.empty() || any_formed) continue;
    for (int n : late) workers_[n].state = State::Ended;
    job.drop_host(name);
    h.running = false;
    say(fmt::format("elastic: stopping workers {} on {}: they joined as the job was ending", numbers(late), name));
  }
}

bool ElasticDriver::finished() const { return ending_ && live() == 0; }

}  // namespace kolorun
