// The public Communicator: checks every argument (so that a bad call is an
// error naming the problem, never a hang or a wrong answer on some rank) and
// hands the collective to the engine.
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "comm/alltoallv.h"
#include "core/config.h"
#include "core/error.h"
#include "core/ranges.h"
#include "core/rejected.h"
#include "comm/context.h"
#include "transport/gpu.h"

namespace kolo {



namespace {

detail::Context& ctx_of(const std::shared_ptr<detail::Context>& c) {
  if (!c) fail("this Communicator is not initialised; create it with kolo::init()");
  return *c;
}

void check_dtype_op(const char* what, DType t, Op op, bool reduces) {
  if (static_cast<unsigned>(t) > static_cast<unsigned>(DType::U8))
    fail("{}: invalid dtype value {}", what, static_cast<int>(t));
  if (!reduces) return;
  if (static_cast<unsigned>(op) > static_cast<unsigned>(Op::Product))
    fail("{}: invalid op value {}", what, static_cast<int>(op));
  if (!op_supported(t, op))
    fail("{}: op {} is not defined for {} (use a floating type, or sum and divide yourself)", what,
         op_name(op), dtype_name(t));
}

// count elements of t times `blocks`, checked for overflow (a negative count
// converted to size_t lands here too).
std::size_t checked_bytes(const char* what, std::size_t count, DType t, std::size_t blocks) {
  const std::size_t limit = std::numeric_limits<std::int64_t>::max() / dtype_size(t) / blocks;
  if (count > limit)
    fail("{}: count {} is too large (negative, or overflows the byte size)", what, count);
  return count * dtype_size(t) * blocks;
}

void check_buffer(const char* what, const char* name, const void* p, std::size_t bytes) {
  if (p == nullptr && bytes > 0) fail("{}: {} buffer is null but {} bytes were asked for", what, name, bytes);
}

// A null buffer passes the checks only with 0 bytes; the backends then see a
// valid address instead, since memcpy(dst, nullptr, 0) is undefined behaviour.
template <class P>
P* nonnull(P* p) {
  static char empty;
  return p != nullptr ? p : static_cast<P*>(static_cast<void*>(&empty));
}

void check_root(const char* what, int root, int size) {
  if (root < 0 || root >= size)
    fail("{}: root {} is not a rank of this communicator (size {})", what, root, size);
}

// Wraps a collective's body: number it, announce its fingerprint, run it.
// `bytes`: what the timeline reports as the collective's size on this rank.
template <class F>
auto collective(detail::Context& c, Fingerprint fp, std::size_t bytes, F body) {
  static const bool verify = config::verify_calls();
  return [&c, fp, body = std::move(body), trace = detail::timeline::Trace(c, bytes)]() mutable {
    fp.seq = ++c.seq;
    trace.start(fp, c.backend ? c.backend->name() : nullptr);
    try {
      if (verify) c.backend->begin(fp);
      body();
    } catch (const MismatchError& e) {
      trace.finish(true);
      c.reject_collective(e);
    } catch (const IoError& e) {
      trace.finish(true);
      c.fail_collective(e, false);
    } catch (const Error& e) {
      trace.finish(true);
      c.fail_collective(e, true);
    }
    trace.finish(false);
  };
}

// A collective's buffers: what it reads and what it writes (device memory:
// what is copied to and from the host; broadcast's non-root ranks read nothing).
struct Buffers {
  const void* in;
  std::size_t in_bytes;
  void* out;
  std::size_t out_bytes;
};

// Queues (or, blocking, runs) a validated collective whose host transport
// call is host(in, out). Host memory: a blocking call runs inline when
// nothing is queued. CUDA memory: the collective takes its ticket in the
// caller's stream and its place in the engine's queue together, under the
// issue lock, and its data plane moves the bytes (transport/gpu.h).
// `counts`: allgather(v)'s elements of each rank.
// `name`: a named operation (kolo.h), negotiated on the named channel
// (comm/named_channel.h) instead of queued in call order.
// host(backend, in, out) runs the collective on a backend: the ordered one, or the named channel's.
template <class Host>
Work start(detail::Context& c, bool blocking, const char* what, const Place& place, Fingerprint fp,
           std::size_t bytes, Buffers b, Host host, std::vector<std::size_t> counts = {},
           const std::string& name = {}) {
  if (!name.empty()) {
    if (!place.on_host())
      fail("{} named '{}': named operations take host memory only (leave the name empty on CUDA memory)", what, name);
    c.engine.check();  // an earlier failure
    auto body = [b, host, trace = detail::timeline::Trace(c, bytes)](collectives::Backend& be,
                                                                     const Fingerprint& at) mutable {
      trace.start(at, be.name());
      try {
        host(be, b.in, b.out);
      } catch (...) {
        trace.finish(true);
        throw;
      }
      trace.finish(false);
    };
    return c.make_work(c.named_channel().submit(name, fp, std::move(body)));
  }
  if (place.on_host()) {
    auto op = collective(c, fp, bytes, [&c, b, host] { host(*c.backend, b.in, b.out); });
    if (blocking) {
      c.engine.run(std::move(op));
      return {};
    }
    return c.make_work(c.engine.submit(std::move(op)));
  }
  gpu::check(what, place, {{"input", b.in, b.in_bytes}, {"output", b.out, b.out_bytes}});
  std::shared_ptr<detail::WorkState> state;
  bool complete_before_return = false;
  {
    std::lock_guard lk(c.gpu_issue);
    if (!c.gpu) c.gpu = gpu::make_plane(c.size, c.cross_size == 1, c.gpu_farewell());
    // The plane in the fingerprint: ranks whose planes differ (NCCL loaded on
    // some only) get the mismatch error, not each other's protocol.
    const gpu::Call call{what, on(fp, place, c.gpu->code()), std::move(counts), b.in, b.in_bytes, b.out, b.out_bytes};
    // A blocking call returns once its result is in device memory, so the
    // caller's stream needs no wait on the GPU: one CUDA call less, and no
    // CUDA call the engine makes for it (an IPC mapping, NCCL's init) can be
    // held up by the caller's stream waiting for the engine.
    Place at = place;
    if (blocking) at.stream_waits = false;
    auto ticket = c.gpu->issue(call, at);
    complete_before_return = ticket->complete_before_return;
    state = c.engine.submit(collective(c, call.fp, bytes, [&c, ticket, call, host] {
      // Allreduce and broadcast: every element's result depends on that element only.
      std::function<void(const void*, void*, std::size_t)> part;
      if (call.fp.kind == Kind::Allreduce)
        part = [&c, fp = call.fp](const void* i, void* o, std::size_t n) { c.backend->allreduce(i, o, n, fp.dtype, fp.op); };
      else if (call.fp.kind == Kind::Broadcast)
        part = [&c, fp = call.fp](const void*, void* o, std::size_t n) { c.backend->broadcast(o, n, fp.dtype, fp.root); };
      const gpu::HostLink link{
          c.rank, c.size, [&c] { c.backend->barrier(); },
          [&c](const void* mine, void* all, std::size_t n) {
            c.backend->allgatherv(mine, all, std::vector<std::size_t>(c.size, n), DType::U8);
          },
          [&c, host](const void* i, void* o) { host(*c.backend, i, o); }, std::move(part),
          [&c, what = call.what] { c.backend->check_peers(what); }};
      try {
        c.gpu->run(*ticket, call, link);
      } catch (...) {
        ticket->failed();
        throw;
      }
    }));
  }
  if (blocking) {
    detail::Engine::wait(*state);
    return {};
  }
  if (complete_before_return) {
    try {
      detail::Engine::wait(*state);
    } catch (...) {  // the returned Work's wait() reports it
    }
  }
  return c.make_work(std::move(state));
}

}  // namespace

void Communicator::check_length(const char* what, const char* which, std::size_t have,
                                std::size_t need) const {
  if (have != need)
    fail("{}: the {} vector holds {} elements but {} are needed on {} ranks", what, which, have, need,
         size());
}

void Communicator::check_blocks(const char* what, const char* which, std::size_t have) const {
  if (have % static_cast<std::size_t>(size()) != 0)
    fail("{}: the {} vector holds {} elements, not a multiple of the {} ranks", what, which, have, size());
}

int Communicator::rank() const { return ctx_of(ctx_).rank; }
int Communicator::size() const { return ctx_of(ctx_).size; }
int Communicator::local_rank() const { return ctx_of(ctx_).local_rank; }
int Communicator::local_size() const { return ctx_of(ctx_).local_size; }
int Communicator::cross_rank() const { return ctx_of(ctx_).cross_rank; }
int Communicator::cross_size() const { return ctx_of(ctx_).cross_size; }
bool Communicator::failed() const { return ctx_ != nullptr && ctx_->engine.broken(); }

bool cuda_built() { return gpu::built(); }

std::string Communicator::gpu_transport() const {
  auto& c = ctx_of(ctx_);
  std::lock_guard lk(c.gpu_issue);
  return c.gpu ? c.gpu->name() : gpu::planned_plane(c.size, c.cross_size == 1);
}

std::string Communicator::transport() const {
  auto& c = ctx_of(ctx_);
  if (!c.backend) fail("this communicator lost its transport after a failure; form a new one with kolo::init()");
  return c.backend->name();
}

// ---- allreduce ----------------------------------------------------------------
static Work allreduce_op(detail::Context& c, bool blocking, const void* in, void* out, std::size_t count,
                         DType t, Op op, const Shape& shape, const Place& place, const std::string& name = {}) {
  const char* what = "allreduce";
  check_dtype_op(what, t, op, true);
  const std::size_t bytes = checked_bytes(what, count, t, 1);
  check_buffer(what, "input", in, bytes);
  check_buffer(what, "output", out, bytes);
  if (in != out && overlap(in, bytes, out, bytes))
    fail("{}: input and output overlap without being the same buffer", what);
  in = nonnull(in);
  out = nonnull(out);
  return start(c, blocking, what, place, with_shape(fingerprint(Kind::Allreduce, t, count, op), shape), bytes,
               {in, bytes, out, bytes},
               [count, t, op](collectives::Backend& be, const void* i, void* o) { be.allreduce(i, o, count, t, op); },
               {}, name);
}

void Communicator::allreduce(const void* in, void* out, std::size_t count, DType t, Op op,
                             const Shape& shape, const Place& place) {
  allreduce_op(ctx_of(ctx_), true, in, out, count, t, op, shape, place);
}
Work Communicator::allreduce_async(const void* in, void* out, std::size_t count, DType t, Op op,
                                   const Shape& shape, const Place& place, const std::string& name) {
  return allreduce_op(ctx_of(ctx_), false, in, out, count, t, op, shape, place, name);
}

// ---- broadcast ----------------------------------------------------------------
static Work broadcast_op(detail::Context& c, bool blocking, void* data, std::size_t count, DType t, int root,
                         const Shape& shape, const Place& place, const std::string& name = {}) {
  const char* what = "broadcast";
  check_dtype_op(what, t, Op::Sum, false);
  check_root(what, root, c.size);
  const std::size_t bytes = checked_bytes(what, count, t, 1);
  check_buffer(what, "data", data, bytes);
  data = nonnull(data);
  // Only the root's data is read.
  return start(c, blocking, what, place, with_shape(fingerprint(Kind::Broadcast, t, count, Op::Sum, root), shape),
               bytes, {data, c.rank == root ? bytes : 0, data, bytes},
               [count, t, root](collectives::Backend& be, const void*, void* o) { be.broadcast(o, count, t, root); },
               {}, name);
}

void Communicator::broadcast(void* data, std::size_t count, DType t, int root, const Shape& shape,
                             const Place& place) {
  broadcast_op(ctx_of(ctx_), true, data, count, t, root, shape, place);
}
Work Communicator::broadcast_async(void* data, std::size_t count, DType t, int root, const Shape& shape,
                                   const Place& place, const std::string& name) {
  return broadcast_op(ctx_of(ctx_), false, data, count, t, root, shape, place, name);
}

// ---- allgather(v) -------------------------------------------------------------
static Work allgatherv_op(detail::Context& c, bool blocking, const char* what, const void* in, void* out,
                          std::vector<std::size_t> counts, DType t, const Place& place, const std::string& name = {}) {
  check_dtype_op(what, t, Op::Sum, false);
  if (counts.size() != static_cast<std::size_t>(c.size))
    fail("{}: counts has {} entries but the communicator has {} ranks", what, counts.size(), c.size);
  // Each count is checked as size() blocks, so the byte sizes add up to at
  // most int64's maximum (summing the block totals would wrap from 3 ranks on).
  std::size_t total = 0;
  for (std::size_t n : counts) total += checked_bytes(what, n, t, c.size) / c.size;
  const std::size_t mine = counts[c.rank] * dtype_size(t);
  check_buffer(what, "input", in, mine);
  check_buffer(what, "output", out, total);
  std::size_t my_offset = 0;
  for (int q = 0; q < c.rank; ++q) my_offset += counts[q] * dtype_size(t);
  const char* mine_in_out = static_cast<const char*>(out) + my_offset;
  if (in != mine_in_out && overlap(in, mine, out, total))
    fail("{}: input overlaps the output other than at this rank's block (in place means in == out + offset of rank {})",
         what, c.rank);
  in = nonnull(in);
  out = nonnull(out);
  const bool equal = std::string_view(what) == "allgather";
  Fingerprint fp = equal ? fingerprint(Kind::Allgather, t, counts[0]) : fingerprint_v(t, counts);
  std::vector<std::size_t> per_rank = counts;
  return start(c, blocking, what, place, fp, total, {in, mine, out, total},
               [counts = std::move(counts), t](collectives::Backend& be, const void* i, void* o) {
                 be.allgatherv(i, o, counts, t);
               },
               std::move(per_rank), name);
}

void Communicator::allgather(const void* in, void* out, std::size_t count, DType t, const Place& place) {
  auto& c = ctx_of(ctx_);
  allgatherv_op(c, true, "allgather", in, out, std::vector<std::size_t>(c.size, count), t, place);
}
Work Communicator::allgather_async(const void* in, void* out, std::size_t count, DType t, const Place& place,
                                   const std::string& name) {
  auto& c = ctx_of(ctx_);
  return allgatherv_op(c, false, "allgather", in, out, std::vector<std::size_t>(c.size, count), t, place, name);
}
void Communicator::allgatherv(const void* in, void* out, const std::vector<std::size_t>& counts,
                              DType t, const Place& place) {
  allgatherv_op(ctx_of(ctx_), true, "allgatherv", in, out, counts, t, place);
}
Work Communicator::allgatherv_async(const void* in, void* out, const std::vector<std::size_t>& counts, DType t,
                                    const Place& place, const std::string& name) {
  return allgatherv_op(ctx_of(ctx_), false, "allgatherv", in, out, counts, t, place, name);
}

// ---- reduce-scatter -----------------------------------------------------------
static Work reduce_scatter_op(detail::Context& c, bool blocking, const void* in, void* out, std::size_t count,
                              DType t, Op op, const Shape& shape, const Place& place, const std::string& name = {}) {
  const char* what = "reduce_scatter";
  check_dtype_op(what, t, op, true);
  const std::size_t total = checked_bytes(what, count, t, c.size), block = total / c.size;
  check_buffer(what, "input", in, total);
  check_buffer(what, "output", out, block);
  const char* my_block = static_cast<const char*>(in) + block * c.rank;
  if (out != my_block && overlap(in, total, out, block))
    fail("{}: output overlaps the input other than at this rank's block (in place means out == in + offset of rank {})",
         what, c.rank);
  in = nonnull(in);
  out = nonnull(out);
  return start(c, blocking, what, place, with_shape(fingerprint(Kind::ReduceScatter, t, count, op), shape), total,
               {in, total, out, block},
               [count, t, op](collectives::Backend& be, const void* i, void* o) { be.reduce_scatter(i, o, count, t, op); },
               {}, name);
}

void Communicator::reduce_scatter(const void* in, void* out, std::size_t count, DType t, Op op,
                                  const Shape& shape, const Place& place) {
  reduce_scatter_op(ctx_of(ctx_), true, in, out, count, t, op, shape, place);
}
Work Communicator::reduce_scatter_async(const void* in, void* out, std::size_t count, DType t,
                                        Op op, const Shape& shape, const Place& place, const std::string& name) {
  return reduce_scatter_op(ctx_of(ctx_), false, in, out, count, t, op, shape, place, name);
}

// ---- alltoall(v) --------------------------------------------------------------
// Both run as the backend's alltoallv. alltoall's blocks are equal, so the
// fingerprint's count checks them; alltoallv's differ per rank, so its ranks
// exchange their counts inside the collective first (alltoallv.h).
static Work alltoall_op(detail::Context& c, bool blocking, const void* in, void* out, std::size_t count, DType t,
                        const Place& place, const std::string& name = {}) {
  const char* what = "alltoall";
  check_dtype_op(what, t, Op::Sum, false);
  const std::size_t total = checked_bytes(what, count, t, c.size);
  check_buffer(what, "input", in, total);
  check_buffer(what, "output", out, total);
  if (overlap(in, total, out, total)) fail("{}: input and output must not overlap", what);
  in = nonnull(in);
  out = nonnull(out);
  auto a = detail::alltoallv_args(what, c.size, t, std::vector<std::size_t>(c.size, count), {},
                                  std::vector<std::size_t>(c.size, count), {});
  return start(c, blocking, what, place, fingerprint(Kind::Alltoall, t, count), total, {in, total, out, total},
               [a = std::move(a), count, t](collectives::Backend& be, const void* i, void* o) {
                 be.alltoallv(i, o, a.layout(count), t);
               },
               {}, name);
}

static Work alltoallv_op(detail::Context& c, bool blocking, const void* in, const std::vector<std::size_t>& sc,
                         const std::vector<std::size_t>& so, void* out, const std::vector<std::size_t>& rc,
                         const std::vector<std::size_t>& ro, DType t, const Place& place,
                         const std::string& name = {}) {
  const char* what = "alltoallv";
  check_dtype_op(what, t, Op::Sum, false);
  auto a = detail::alltoallv_args(what, c.size, t, sc, so, rc, ro);
  if (!place.on_host())
    fail("{}: buffers in CUDA memory are not supported yet (alltoall's equal blocks are); stage them in host "
         "memory", what);
  const std::size_t es = dtype_size(t), in_bytes = a.in_elements * es, out_bytes = a.out_elements * es;
  check_buffer(what, "input", in, in_bytes);
  check_buffer(what, "output", out, out_bytes);
  if (overlap(in, in_bytes, out, out_bytes)) fail("{}: input and output must not overlap", what);
  in = nonnull(in);
  out = nonnull(out);
  return start(c, blocking, what, place, fingerprint(Kind::Alltoallv, t, 0), in_bytes,
               {in, in_bytes, out, out_bytes},
               [&c, a = std::move(a), t](collectives::Backend& be, const void* i, void* o) {
                 const std::size_t longest = detail::agree_alltoallv_counts(c, be, a);
                 be.alltoallv(i, o, a.layout(longest), t);
               },
               {}, name);
}

void Communicator::alltoall(const void* in, void* out, std::size_t count, DType t, const Place& place) {
  alltoall_op(ctx_of(ctx_), true, in, out, count, t, place);
}
Work Communicator::alltoall_async(const void* in, void* out, std::size_t count, DType t, const Place& place,
                                  const std::string& name) {
  return alltoall_op(ctx_of(ctx_), false, in, out, count, t, place, name);
}

void Communicator::set_joined(bool on) {
  auto& c = ctx_of(ctx_);
  c.engine.check();
  c.named_channel().set_joined(on);
}
void Communicator::alltoallv(const void* in, const std::vector<std::size_t>& send_counts,
                             const std::vector<std::size_t>& send_offsets, void* out,
                             const std::vector<std::size_t>& recv_counts,
                             const std::vector<std::size_t>& recv_offsets, DType t, const Place& place) {
  alltoallv_op(ctx_of(ctx_), true, in, send_counts, send_offsets, out, recv_counts, recv_offsets, t, place);
}
Work Communicator::alltoallv_async(const void* in, const std::vector<std::size_t>& send_counts,
                                   const std::vector<std::size_t>& send_offsets, void* out,
                                   const std::vector<std::size_t>& recv_counts,
                                   const std::vector<std::size_t>& recv_offsets, DType t, const Place& place,
                                   const std::string& name) {
  return alltoallv_op(ctx_of(ctx_), false, in, send_counts, send_offsets, out, recv_counts, recv_offsets, t, place,
                      name);
}

std::vector<std::size_t> Communicator::alltoallv_counts(const std::vector<std::size_t>& send_counts) {
  auto& c = ctx_of(ctx_);
  if (send_counts.size() != static_cast<std::size_t>(c.size))
    fail("alltoallv_counts: send counts has {} entries but the communicator has {} ranks", send_counts.size(),
         c.size);
  static_assert(sizeof(std::size_t) == sizeof(std::int64_t), "counts travel as i64");
  std::vector<std::size_t> recv_counts(c.size);
  alltoall_op(c, true, send_counts.data(), recv_counts.data(), 1, DType::I64, {});
  return recv_counts;
}

void Communicator::check_sum(const char* what, std::size_t have, const std::vector<std::size_t>& counts) const {
  std::size_t sum = 0;
  for (std::size_t n : counts) sum += n;
  if (have != sum) fail("{}: the input vector holds {} elements but the send counts add up to {}", what, have, sum);
}

// ---- barrier ------------------------------------------------------------------
static auto barrier_op(detail::Context& c) {
  return collective(c, fingerprint(Kind::Barrier, DType::U8, 0), 0, [&c] { c.backend->barrier(); });
}

void Communicator::barrier() {
  auto& c = ctx_of(ctx_);
  c.engine.run(barrier_op(c));
}
Work Communicator::barrier_async() {
  auto& c = ctx_of(ctx_);
  return c.make_work(c.engine.submit(barrier_op(c)));
}

}  // namespace kolo
