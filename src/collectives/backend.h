// The interface every transport's set of collective algorithms implements.
// Arguments have been validated by the Communicator; counts are in elements.
//
// The algorithms live by data plane, one file each: shm/ (every rank reads
// the others' slots of one segment in place), tcp/ (copies between pairs),
// hier/ (across hosts: composed of the shm/ and tcp/ ones). No algorithm is
// written twice: what a one-shot allreduce shares between shm and TCP is the
// reduction in rank order (kernels/reduce.h); how the inputs meet — in place
// in shared memory, or copied over the network — is the algorithm.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collectives/blocks.h"
#include "core/fingerprint.h"
#include "core/ranges.h"
#include "kernels/reduce.h"
#include "kolo/kolo.h"

#include "transport/members.h"

namespace kolo::rdv { class StoreClient; struct HostMap; }

namespace kolo::collectives {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Called before each collective with what this rank is about to do.
  virtual void begin(const Fingerprint& fp) {}
  // After a failure on this rank: make peers waiting on us fail now rather
  // than at their timeout (telling them `reason` where the transport can).
  // The backend is unusable afterwards.
  virtual void abort(const std::string& reason) {}
  // For a rank waiting on something other than this transport (a GPU
  // collective that NCCL moves): fails, naming it, if a peer is known to have
  // failed or gone (its process died, its connection closed). Never blocks; a
  // host that vanished silently is not seen here (no data is in flight).
  virtual void check_peers(const char* what) {}
  virtual void allreduce(const void* in, void* out, std::size_t count, DType t, Op op) = 0;
  virtual void broadcast(void* data, std::size_t count, DType t, int root) = 0;
  virtual void allgatherv(const void* in, void* out, std::span<const std::size_t> counts,
                          DType t) = 0;
  virtual void reduce_scatter(const void* in, void* out, std::size_t count, DType t, Op op) = 0;
  // alltoall too (equal blocks): the layout was checked to agree across ranks.
  virtual void alltoallv(const void* in, void* out, const AlltoallvLayout& l, DType t) = 0;
  virtual void barrier() = 0;
};

// One rank: every collective is a copy.
std::unique_ptr<Backend> make_self_backend();
// All ranks on this host, through one shared-memory segment; `members`
// names them in messages (a subgroup's world ranks).
std::unique_ptr<Backend> make_shm_backend(rdv::StoreClient& store, const std::string& prefix,
                                          const std::string& job_id, int rank, int size,
                                          transport::Members members);
// TCP connections between every pair of ranks; `address` is the one this
// rank advertises (net/nic.h), `members` names ranks' hosts in messages.
std::unique_ptr<Backend> make_tcp_backend(rdv::StoreClient& store, const std::string& prefix,
                                          int rank, int size, const std::string& address,
                                          transport::Members members);
// Ranks on several hosts: shared memory within each host, TCP between hosts
// (hier/algorithms.h). `world`: the world rank of each rank, for messages
// (null when the communicator is the world).
std::unique_ptr<Backend> make_hier_backend(rdv::StoreClient& store, const std::string& prefix,
                                           const std::string& job_id, int rank,
                                           const rdv::HostMap& hosts, const std::string& address,
                                           std::shared_ptr<const std::vector<int>> world);

// Reduction kernels take Sum plus a divisor for Average (kernels/reduce.h);
// pieces of a buffer, one per rank (core/ranges.h).
using kernels::kernel_divisor;
using kernels::kernel_op;

}  // namespace kolo::collectives
