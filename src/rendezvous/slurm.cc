#include "rendezvous/slurm.h"

#include <cctype>
#include <vector>

#include "core/error.h"
#include "rendezvous/discovery.h"

namespace kolo::rdv {

namespace {

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// A small decimal that cannot overflow an int (task counts, repeat counts).
int small_number(const std::string& s, const std::string& whole) {
  if (!all_digits(s) || s.size() > 9) fail("rendezvous: SLURM_TASKS_PER_NODE={} is malformed", whole);
  return std::stoi(s);
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first host is the first element before a comma outside brackets,
  // with every bracket group replaced by its first number; the text of the
  // number is kept as written, since "node[03-05]" names "node03".
  std::string host;
  for (std::size_t i = 0; i < nodelist.size() && nodelist[i] != ',';) {
    if (nodelist[i] == ']') fail("rendezvous: Slurm node list '{}' has an unmatched ']'", nodelist);
    if (nodelist[i] != '[') {
      host += nodelist[i++];
      continue;
    }
    const std::size_t close = nodelist.find(']', i);
    if (close == std::string::npos) fail("rendezvous: Slurm node list '{}' has an unclosed '['", nodelist);
    const std::string group = nodelist.substr(i + 1, close - i - 1);
    const std::string first = group.substr(0, group.find_first_of(",-"));
    if (!all_digits(first))
      fail("rendezvous: Slurm node list '{}' has a malformed range '[{}]'", nodelist, group);
    host += first;
    i = close + 1;
  }
  if (host.empty()) fail("rendezvous: Slurm node list '{}' names no host", nodelist);
  return host;
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id) {
  struct Run {
    int tasks;
    int nodes;
  };
  std::vector<Run> runs;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = tasks_per_node.find(',', start);
    const std::string item = tasks_per_node.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::size_t paren = item.find("(x");
    if (paren == std::string::npos) {
      runs.push_back({small_number(item, tasks_per_node), 1});
    } else {
      if (item.back() != ')') fail("rendezvous: SLURM_TASKS_PER_NODE={} is malformed", tasks_per_node);
      runs.push_back({small_number(item.substr(0, paren), tasks_per_node),
                      small_number(item.substr(paren + 2, item.size() - paren - 3), tasks_per_node)});
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (node_id < 0) {
    for (const Run& r : runs)
      if (r.tasks != runs[0].tasks) return -1;
    return runs[0].tasks;
  }
  int first_node = 0;
  for (const Run& r : runs) {
    if (node_id < first_node + r.nodes) return r.tasks;
    first_node += r.nodes;
  }
  fail("rendezvous: SLURM_NODEID={} is past the {} nodes of SLURM_TASKS_PER_NODE={}", node_id,
       first_node, tasks_per_node);
}

}  // namespace kolo::rdv
