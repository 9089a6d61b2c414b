// Connecting the ranks of a communicator (the world at init(), or a subgroup
// at Communicator::split): learn which of them share a host, choose the
// transport and build the backend.
#pragma once

#include "comm/context.h"

namespace kolo::detail {

// Collective over c's ranks. Needs c.rank, c.size, c.store, c.prefix (a key
// space no other communicator uses), c.job_id and c.world; sets c.local_rank,
// c.local_size and c.backend. Ranks of one host share memory; ranks on
// several hosts use the hierarchy (KOLO_HIERARCHICAL) or a flat TCP mesh;
// KOLO_TRANSPORT forces shm or tcp.
void connect(Context& c);

}  // namespace kolo::detail
