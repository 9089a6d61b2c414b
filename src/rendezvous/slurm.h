// Slurm's compact notations: host lists ("node[03-05,7],gpu1") and task
// counts per node ("2(x3),1"). first_slurm_host() is declared in discovery.h.
#pragma once

#include <string>

namespace kolo::rdv {

// Tasks on node node_id (SLURM_NODEID) of a SLURM_TASKS_PER_NODE value such
// as "2(x3),1" (nodes 0-2 run 2 tasks, node 3 runs 1). With node_id < 0 the
// answer is known only when every node runs the same count; -1 otherwise.
// Throws kolo::Error on a malformed value or a node_id past the list.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id);

}  // namespace kolo::rdv
