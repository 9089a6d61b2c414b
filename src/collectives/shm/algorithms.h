// Collectives over one shared-memory segment (transport/shm_group.h), one
// file each. Every rank writes its own slots and reads the others' slots; see
// shm_group.h for the epoch rule that makes slot reuse safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "collectives/blocks.h"
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
// The step loop of collectives whose input holds blocks (block q: b.counts[q]
// elements from b.offsets[q]): each epoch stages the next piece of every block
// in this rank's slot (block q at offset q*piece), synchronises, then calls
// read(epoch, first element, piece) to take what this rank needs. It steps
// through `longest` elements, which must be the same on every rank (and at
// least this rank's longest block).
template <class Read>
void shm_block_pieces_v(ShmGroup& g, const void* in, Blocks b, std::size_t longest, std::size_t es,
                        const char* what, Read&& read) {
  const std::size_t blocks = b.counts.size();
  const std::size_t piece = std::max<std::size_t>(1, g.chunk_bytes() / blocks / es);
  const auto* src = static_cast<const char*>(in);
  for (std::size_t at = 0; at < longest || at == 0; at += piece) {  // at least one step
    const std::uint64_t e = g.next_epoch();
    char* mine = g.slot(g.rank(), e);
    for (std::size_t q = 0; q < blocks; ++q)
      if (at < b.counts[q])
        std::memcpy(mine + q * piece * es, src + (b.offsets[q] + at) * es, std::min(piece, b.counts[q] - at) * es);
    g.publish(e);
    g.wait_all(e, what);
    read(e, at, piece);
  }
}

// The same for n equal blocks of `count` elements (reduce-scatter):
// read(epoch, first element, elements, piece).
template <class Read>
void shm_block_pieces(ShmGroup& g, const void* in, std::size_t count, std::size_t es,
                      const char* what, Read&& read) {
  const int n = g.size();
  std::vector<std::size_t> offsets(n), counts(n, count);
  for (int q = 0; q < n; ++q) offsets[q] = q * count;
  shm_block_pieces_v(g, in, Blocks{offsets, counts}, count, es, what,
                     [&](std::uint64_t e, std::size_t at, std::size_t piece) {
                       read(e, at, std::min(piece, count - at), piece);
                     });
}

// A reduce-scatter into blocks of any size owned by the first counts.size()
// members: member q reduces block q over every member's input (in member
// order) into its own out at offsets[q]. `kop` is the kernel's op, `divisor`
// what the result is divided by (0: nothing). In place (in == out) works.
void shm_reduce_blocks(ShmGroup& g, const void* in, void* out, std::span<const std::size_t> offsets,
                       std::span<const std::size_t> counts, DType t, Op kop, int divisor);

void shm_reduce_scatter(ShmGroup& g, const void* in, void* out, std::size_t count, DType t, Op op);
void shm_alltoallv(ShmGroup& g, const void* in, void* out, const AlltoallvLayout& l, DType t);

}  // namespace kolo::collectives
