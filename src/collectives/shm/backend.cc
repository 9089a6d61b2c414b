// The shared-memory backend: all ranks of the communicator on one host.
#include "collectives/backend.h"
#include "collectives/select.h"
#include "collectives/shm/algorithms.h"

namespace kolo::collectives {

namespace {

class ShmBackend final : public Backend {
 public:
  ShmBackend(rdv::StoreClient& store, const std::string& prefix, const std::string& job_id,
             int rank, int size, transport::Members members)
      : g_(store, prefix, job_id, rank, size, std::move(members)) {}

  const char* name() const override { return "shm"; }
  void begin(const Fingerprint& fp) override { g_.begin(fp); }
  void abort(const std::string& reason) override { g_.abort(reason); }
  void check_peers(const char* what) override { g_.check_peers(what); }

  void allreduce(const void* in, void* out, std::size_t count, DType t, Op op) override {
    if (run_oneshot(Plane::Shm, count * dtype_size(t), g_.chunk_bytes()))
      shm_allreduce_oneshot(g_, in, out, count, t, op);
    else
      shm_allreduce_chunked(g_, in, out, count, t, op);
  }
  void broadcast(void* data, std::size_t count, DType t, int root) override {
    shm_broadcast(g_, data, count, t, root);
  }
  void allgatherv(const void* in, void* out, std::span<const std::size_t> counts,
                  DType t) override {
    shm_allgatherv(g_, in, out, counts, t);
  }
  void reduce_scatter(const void* in, void* out, std::size_t count, DType t, Op op) override {
    shm_reduce_scatter(g_, in, out, count, t, op);
  }
  void alltoallv(const void* in, void* out, const AlltoallvLayout& l, DType t) override {
    shm_alltoallv(g_, in, out, l, t);
  }
  void barrier() override { g_.sync("barrier"); }

 private:
  transport::ShmGroup g_;
};

}  // namespace

std::unique_ptr<Backend> make_shm_backend(rdv::StoreClient& store, const std::string& prefix,
                                          const std::string& job_id, int rank, int size,
                                          transport::Members members) {
  return std::make_unique<ShmBackend>(store, prefix, job_id, rank, size, std::move(members));
}

}  // namespace kolo::collectives
