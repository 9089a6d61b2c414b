// Collectives over one shared-memory segment (transport/shm_group.h), one
// file each. Every rank writes its own slots and reads the others' slots; see
// shm_group.h for the epoch rule that makes slot reuse safe.
#pragma once

#include <cstddef>
#include <span>

#include "kolo/kolo.h"
#include "transport/shm_group.h"

namespace kolo::collectives {

using transport::ShmGroup;

// Small messages: every rank copies its input into its slot and, after one
// synchronisation, reduces all slots in rank order itself.
void shm_allreduce_oneshot(ShmGroup& g, const void* in, void* out, std::size_t count, DType t,
                           Op op);
// Large messages: chunk by chunk, each rank reduces its 1/n of the chunk in
// place in its own slot, and everybody copies the reduced pieces out one step
// later; the data streams through the cache once.
void shm_allreduce_chunked(ShmGroup& g, const void* in, void* out, std::size_t count, DType t,
                           Op op);
void shm_broadcast(ShmGroup& g, void* data, std::size_t count, DType t, int root);
void shm_allgatherv(ShmGroup& g, const void* in, void* out, std::span<const std::size_t> counts,
                    DType t);
void shm_reduce_scatter(ShmGroup& g, const void* in, void* out, std::size_t count, DType t, Op op);
void shm_alltoall(ShmGroup& g, const void* in, void* out, std::size_t count, DType t);

}  // namespace kolo::collectives
