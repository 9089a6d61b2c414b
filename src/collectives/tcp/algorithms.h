// Collectives over the TCP mesh (transport/tcp_mesh.h), one file each.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "collectives/blocks.h"
#include "kolo/kolo.h"
#include "transport/tcp_mesh.h"

namespace kolo::collectives {

using transport::TcpMesh;

// Reusable buffers, grown on demand and kept, so the data path does not
// allocate once a job has seen its largest message.
struct Scratch {
  std::vector<char> a, b;
  char* get(std::vector<char>& v, std::size_t bytes) {
    // Never null, also for 0 bytes: memcpy from or to nullptr is undefined.
    if (v.size() < bytes || v.empty()) v.resize(std::max<std::size_t>(bytes, 1));
    return v.data();
  }
};

// Ring reduce-scatter in place over `work`: afterwards rank r holds block r
// reduced over all ranks (divided by `divisor` if > 0). `recv` holds the
// largest block.
void ring_reduce_scatter(TcpMesh& m, char* work, char* recv, Blocks b, DType t, Op op,
                         int divisor);
// Ring allgather in place over `work`: rank r starts with block r, ends with all.
void ring_allgather(TcpMesh& m, char* work, Blocks b, DType t);

// `kop` is the kernel's op (Sum for Average) and `divisor` what the result is
// divided by (0: nothing): the mesh may be a part of the job (hier_*).
void tcp_allreduce_ring(TcpMesh& m, Scratch& s, const void* in, void* out, std::size_t count,
                        DType t, Op kop, int divisor);
void tcp_allreduce_oneshot(TcpMesh& m, Scratch& s, const void* in, void* out, std::size_t count,
                           DType t, Op kop, int divisor);
void tcp_broadcast(TcpMesh& m, void* data, std::size_t count, DType t, int root);
void tcp_allgatherv(TcpMesh& m, const void* in, void* out, std::span<const std::size_t> counts,
                    DType t);
void tcp_reduce_scatter(TcpMesh& m, Scratch& s, const void* in, void* out, std::size_t count,
                        DType t, Op op);
// Pairwise exchange of blocks of any size (alltoall: equal ones).
void tcp_alltoallv(TcpMesh& m, const void* in, void* out, const AlltoallvLayout& l, DType t);
void tcp_barrier(TcpMesh& m);

}  // namespace kolo::collectives
