#include "collectives/hier/algorithms.h"

namespace kolo::collectives {

// The root's host first shares the message on shared memory (so its leader
// has it), the leaders pass it along a pipelined TCP chain starting at the
// root's host, and every other host's leader shares it with its host.
void hier_broadcast(Hier& h, void* data, std::size_t count, DType t, int root) {
  int root_host = 0, root_local = 0;
  for (int g = 0; g < h.hosts; ++g)
    for (std::size_t i = 0; i < h.host_ranks[g].size(); ++i)
      if (h.host_ranks[g][i] == root) root_host = g, root_local = static_cast<int>(i);
  if (h.host == root_host) shm_broadcast(*h.local, data, count, t, root_local);
  if (h.leader()) tcp_broadcast(*h.cross, data, count, t, root_host);
  if (h.host != root_host) shm_broadcast(*h.local, data, count, t, 0);
}

}  // namespace kolo::collectives
