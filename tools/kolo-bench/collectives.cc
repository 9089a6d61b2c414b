#include "collectives.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include "values.h"

namespace kolo_bench {

namespace {

using kolo::DType;
using kolo::Work;

// A cache-line aligned heap buffer (large messages: no value-initialisation).
class Buffer {
 public:
  explicit Buffer(std::size_t bytes) {
    const std::size_t n = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
    p_ = static_cast<char*>(std::aligned_alloc(64, n));
    if (!p_) throw std::bad_alloc();
  }
  ~Buffer() { std::free(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* get() const { return p_; }

 private:
  char* p_;
};

// Elements per rank block: at least one, so every size moves data.
std::size_t per_rank(std::size_t bytes, DType t, int n) {
  return std::max<std::size_t>(1, bytes / kolo::dtype_size(t) / n);
}

struct Common {
  kolo::Communicator& comm;
  DType t;
  int rank, n;
  std::size_t es;
  Common(kolo::Communicator& c, const Options& o)
      : comm(c), t(o.dtype), rank(c.rank()), n(c.size()), es(kolo::dtype_size(o.dtype)) {}
};

class Allreduce final : public Case, Common {
 public:
  Allreduce(kolo::Communicator& c, const Options& o, std::size_t b)
      : Common(c, o), op_(o.op), inplace_(o.inplace), in_(b0(b)), out_(inplace_ ? 0 : b0(b)) {
    count = per_rank(b, t, 1);
    bytes = count * es;
  }
  void prepare() override {
    fill(t, in_.get(), count, 0, [&](std::size_t i) { return reduce_input(t, op_, rank, n, i); });
    reset_outputs();
  }
  void reset_outputs() override {
    if (!inplace_) poison(t, out_.get(), count);
  }
  Work start(bool async) override {
    if (async) return comm.allreduce_async(in_.get(), result(), count, t, op_);
    comm.allreduce(in_.get(), result(), count, t, op_);
    return {};
  }
  std::size_t check() override {
    return mismatches(t, result(), count, 0, [&](std::size_t i) { return reduce_expected(t, op_, n, i); });
  }
  bool idempotent() const override { return !inplace_; }

 private:
  std::size_t b0(std::size_t b) const { return per_rank(b, t, 1) * es; }
  char* result() const { return inplace_ ? in_.get() : out_.get(); }
  kolo::Op op_;
  bool inplace_;
  Buffer in_, out_;
};

class Broadcast final : public Case, Common {
 public:
  Broadcast(kolo::Communicator& c, const Options& o, std::size_t b)
      : Common(c, o), root_(o.root), data_(per_rank(b, t, 1) * es) {
    count = per_rank(b, t, 1);
    bytes = count * es;
  }
  void prepare() override {
    if (rank == root_) fill(t, data_.get(), count, 0, [&](std::size_t i) { return move_value(t, root_, i); });
    reset_outputs();
  }
  void reset_outputs() override {
    if (rank != root_) poison(t, data_.get(), count);
  }
  Work start(bool async) override {
    if (async) return comm.broadcast_async(data_.get(), count, t, root_);
    comm.broadcast(data_.get(), count, t, root_);
    return {};
  }
  std::size_t check() override {
    return mismatches(t, data_.get(), count, 0, [&](std::size_t i) { return move_value(t, root_, i); });
  }
  bool idempotent() const override { return true; }

 private:
  int root_;
  Buffer data_;
};

class Allgather final : public Case, Common {
 public:
  Allgather(kolo::Communicator& c, const Options& o, std::size_t b)
      : Common(c, o), block_(per_rank(b, t, n)), inplace_(o.inplace),
        in_(inplace_ ? 0 : block_ * es), out_(block_ * n * es) {
    count = block_ * n;
    bytes = count * es;
  }
  void prepare() override {
    fill(t, input(), block_, 0, [&](std::size_t i) { return move_value(t, rank, i); });
    reset_outputs();
  }
  void reset_outputs() override {
    for (int q = 0; q < n; ++q)
      if (!inplace_ || q != rank) poison(t, block(q), block_);
  }
  Work start(bool async) override {
    if (async) return comm.allgather_async(input(), out_.get(), block_, t);
    comm.allgather(input(), out_.get(), block_, t);
    return {};
  }
  std::size_t check() override {
    std::size_t wrong = 0;
    for (int q = 0; q < n; ++q)
      wrong += mismatches(t, block(q), block_, 0, [&](std::size_t i) { return move_value(t, q, i); });
    return wrong;
  }
  bool idempotent() const override { return true; }

 private:
  char* block(int q) const { return out_.get() + q * block_ * es; }
  char* input() const { return inplace_ ? block(rank) : in_.get(); }
  std::size_t block_;
  bool inplace_;
  Buffer in_, out_;
};

class ReduceScatter final : public Case, Common {
 public:
  ReduceScatter(kolo::Communicator& c, const Options& o, std::size_t b)
      : Common(c, o), op_(o.op), block_(per_rank(b, t, n)), inplace_(o.inplace),
        in_(block_ * n * es), out_(inplace_ ? 0 : block_ * es) {
    count = block_ * n;
    bytes = count * es;
  }
  void prepare() override {
    fill(t, in_.get(), block_ * n, 0, [&](std::size_t j) { return reduce_input(t, op_, rank, n, j); });
    reset_outputs();
  }
  void reset_outputs() override {
    if (!inplace_) poison(t, out_.get(), block_);
  }
  Work start(bool async) override {
    if (async) return comm.reduce_scatter_async(in_.get(), result(), block_, t, op_);
    comm.reduce_scatter(in_.get(), result(), block_, t, op_);
    return {};
  }
  std::size_t check() override {
    return mismatches(t, result(), block_, rank * block_,
                      [&](std::size_t j) { return reduce_expected(t, op_, n, j); });
  }
  bool idempotent() const override { return !inplace_; }

 private:
  char* result() const { return inplace_ ? in_.get() + rank * block_ * es : out_.get(); }
  kolo::Op op_;
  std::size_t block_;
  bool inplace_;
  Buffer in_, out_;
};

class Alltoall final : public Case, Common {
 public:
  Alltoall(kolo::Communicator& c, const Options& o, std::size_t b)
      : Common(c, o), block_(per_rank(b, t, n)), in_(block_ * n * es), out_(block_ * n * es) {
    count = block_ * n;
    bytes = count * es;
  }
  void prepare() override {
    fill(t, in_.get(), count, 0, [&](std::size_t j) { return move_value(t, rank, j); });
    reset_outputs();
  }
  void reset_outputs() override { poison(t, out_.get(), count); }
  Work start(bool async) override {
    if (async) return comm.alltoall_async(in_.get(), out_.get(), block_, t);
    comm.alltoall(in_.get(), out_.get(), block_, t);
    return {};
  }
  // Block q of the output is block `rank` of rank q's input.
  std::size_t check() override {
    std::size_t wrong = 0;
    for (int q = 0; q < n; ++q)
      wrong += mismatches(t, out_.get() + q * block_ * es, block_, rank * block_,
                          [&](std::size_t j) { return move_value(t, q, j); });
    return wrong;
  }
  bool idempotent() const override { return true; }

 private:
  std::size_t block_;
  Buffer in_, out_;
};

class Barrier final : public Case {
 public:
  explicit Barrier(kolo::Communicator& c) : comm_(c) {}
  void prepare() override {}
  void reset_outputs() override {}
  Work start(bool async) override {
    if (async) return comm_.barrier_async();
    comm_.barrier();
    return {};
  }
  std::size_t check() override { return 0; }
  bool idempotent() const override { return true; }

 private:
  kolo::Communicator& comm_;
};

}  // namespace

std::unique_ptr<Case> make_case(Coll c, kolo::Communicator& comm, const Options& o,
                                std::size_t bytes) {
  switch (c) {
    case Coll::Allreduce: return std::make_unique<Allreduce>(comm, o, bytes);
    case Coll::Broadcast: return std::make_unique<Broadcast>(comm, o, bytes);
    case Coll::Allgather: return std::make_unique<Allgather>(comm, o, bytes);
    case Coll::ReduceScatter: return std::make_unique<ReduceScatter>(comm, o, bytes);
    case Coll::Alltoall: return std::make_unique<Alltoall>(comm, o, bytes);
    case Coll::Barrier: return std::make_unique<Barrier>(comm);
  }
  return nullptr;
}

double bus_factor(Coll c, int n) {
  switch (c) {
    case Coll::Allreduce: return 2.0 * (n - 1) / n;
    case Coll::Broadcast: return 1.0;
    case Coll::Allgather:
    case Coll::ReduceScatter:
    case Coll::Alltoall: return static_cast<double>(n - 1) / n;
    case Coll::Barrier: return 0.0;
  }
  return 0.0;
}

}  // namespace kolo_bench
