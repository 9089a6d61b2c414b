// The one-rank communicator: every collective is the identity (or a copy).
#include <cstring>

#include "collectives/backend.h"

namespace kolo::collectives {

namespace {

void copy(const void* in, void* out, std::size_t bytes) {
  if (in != out && bytes > 0) std::memmove(out, in, bytes);
}

class SelfBackend final : public Backend {
 public:
  const char* name() const override { return "self"; }
  void allreduce(const void* in, void* out, std::size_t count, DType t, Op) override {
    copy(in, out, count * dtype_size(t));
  }
  void broadcast(void*, std::size_t, DType, int) override {}
  void allgatherv(const void* in, void* out, std::span<const std::size_t> counts,
                  DType t) override {
    copy(in, out, counts[0] * dtype_size(t));
  }
  void reduce_scatter(const void* in, void* out, std::size_t count, DType t, Op) override {
    copy(in, out, count * dtype_size(t));
  }
  void alltoallv(const void* in, void* out, const AlltoallvLayout& l, DType t) override {
    const std::size_t es = dtype_size(t);
    copy(static_cast<const char*>(in) + l.send.offsets[0] * es, static_cast<char*>(out) + l.recv.offsets[0] * es,
         l.send.counts[0] * es);
  }
  void barrier() override {}
};

}  // namespace

std::unique_ptr<Backend> make_self_backend() { return std::make_unique<SelfBackend>(); }

}  // namespace kolo::collectives
