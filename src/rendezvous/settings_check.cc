#include "rendezvous/settings_check.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <vector>

#include "core/config.h"
#include "core/error.h"

namespace kolo::rdv {

namespace {

std::string encode(const std::vector<config::Setting>& settings) {
  std::string text;
  for (const auto& s : settings) text += fmt::format("{}={}\n", s.name, s.value);
  return text;
}

std::map<std::string, std::string> decode(const std::string& text) {
  std::map<std::string, std::string> values;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) values[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return values;
}

// "ranks 0-3, 6 (hosts a, b)": runs of consecutive ranks collapsed, at most
// four host names.
std::string who(const std::vector<int>& ranks, const HostMap& hosts) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  std::vector<std::string> names;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    text += fmt::format("{}{}", i ? ", " : "", ranks[i]);
    if (j > i) text += fmt::format("{}{}", j == i + 1 ? ", " : "-", ranks[j]);
    i = j + 1;
  }
  for (int r : ranks) {
    const std::string& n = hosts.host_name_of(r);
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  text += names.size() == 1 ? " (host " : " (hosts ";
  for (std::size_t i = 0; i < names.size() && i < 4; ++i) text += (i ? ", " : "") + names[i];
  return text + (names.size() > 4 ? ", ...)" : ")");
}

}  // namespace

void publish_settings(StoreClient& store, const std::string& prefix, int rank) {
  store.set(fmt::format("{}/settings/{}", prefix, rank), encode(config::job_wide_settings()));
}

void check_settings_agree(StoreClient& store, const std::string& prefix, int rank, int size,
                          const HostMap& hosts) {
  const Millis timeout(config::rendezvous_timeout_ms());
  const auto mine = config::job_wide_settings();
  publish_settings(store, prefix, rank);
  wait_for_ranks(store, prefix + "/settings", size, timeout);
  std::vector<std::map<std::string, std::string>> all(size);
  for (int q = 0; q < size; ++q) all[q] = decode(store.get(fmt::format("{}/settings/{}", prefix, q), timeout));

  std::vector<std::string> differences;
  for (const auto& s : mine) {
    // value -> ranks holding it, in order of the lowest such rank
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (int q = 0; q < size; ++q) {
      const auto it = all[q].find(s.name);
      const std::string v = it == all[q].end() ? "(unknown to this kolo version)" : it->second;
      auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& p) { return p.first == v; });
      if (g == groups.end()) groups.push_back({v, {q}});
      else g->second.push_back(q);
    }
    if (groups.size() == 1) continue;
    std::string text;
    for (const auto& [v, ranks] : groups) text += fmt::format("{}{}={} on {}", text.empty() ? "" : "; ", s.name, v, who(ranks, hosts));
    differences.push_back(text);
  }
  if (differences.empty()) return;
  std::string text;
  for (const auto& d : differences) text += "\n  " + d;
  // Everyone has read everything before anyone fails: rank 0 may host the
  // store, and its error must not cut off the others' reads.
  try {
    store_barrier(store, prefix + "/settings_read", rank, size);
  } catch (const Error&) {
  }
  fail("kolo's settings differ between the ranks of this job (they must be equal on every rank; kolorun hands its "
       "KOLO_* variables to every rank, under mpirun, srun or torchrun set them for every rank):{}",
       text);
}

}  // namespace kolo::rdv
