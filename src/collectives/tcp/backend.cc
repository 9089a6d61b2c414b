// The TCP backend: ranks on several hosts, or KOLO_TRANSPORT=tcp.
#include <limits>

#include "collectives/backend.h"
#include "collectives/select.h"
#include "collectives/tcp/algorithms.h"

namespace kolo::collectives {

namespace {

class TcpBackend final : public Backend {
 public:
  TcpBackend(rdv::StoreClient& store, const std::string& prefix, int rank, int size,
             const std::string& address, transport::Members members)
      : mesh_(store, prefix, rank, size, address, std::move(members)) {}

  const char* name() const override { return "tcp"; }
  void begin(const Fingerprint& fp) override { mesh_.begin(fp); }
  void abort(const std::string&) override { mesh_.abort(); }
  void check_peers(const char* what) override { mesh_.check_peers(what); }

  void allreduce(const void* in, void* out, std::size_t count, DType t, Op op) override {
    if (run_oneshot(Plane::Tcp, count * dtype_size(t), std::numeric_limits<std::size_t>::max()))
      tcp_allreduce_oneshot(mesh_, scratch_, in, out, count, t, kernel_op(op), kernel_divisor(op, mesh_.size()));
    else
      tcp_allreduce_ring(mesh_, scratch_, in, out, count, t, kernel_op(op), kernel_divisor(op, mesh_.size()));
  }
  void broadcast(void* data, std::size_t count, DType t, int root) override {
    tcp_broadcast(mesh_, data, count, t, root);
  }
  void allgatherv(const void* in, void* out, std::span<const std::size_t> counts,
                  DType t) override {
    tcp_allgatherv(mesh_, in, out, counts, t);
  }
  void reduce_scatter(const void* in, void* out, std::size_t count, DType t, Op op) override {
    tcp_reduce_scatter(mesh_, scratch_, in, out, count, t, op);
  }
  void alltoallv(const void* in, void* out, const AlltoallvLayout& l, DType t) override {
    tcp_alltoallv(mesh_, in, out, l, t);
  }
  void barrier() override { tcp_barrier(mesh_); }

 private:
  transport::TcpMesh mesh_;
  Scratch scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_tcp_backend(rdv::StoreClient& store, const std::string& prefix,
                                          int rank, int size, const std::string& address,
                                          transport::Members members) {
  return std::make_unique<TcpBackend>(store, prefix, rank, size, address, std::move(members));
}

}  // namespace kolo::collectives
