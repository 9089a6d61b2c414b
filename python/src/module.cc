// kolo._C — the Python binding of kolo's public C++ API (include/kolo/kolo.h).
//
// It never links LibTorch: buffers arrive as (data pointer int, element count,
// dtype code), taken from tensor.data_ptr()/numel() or numpy's
// array.ctypes.data/size, so one build serves every torch release. Everything
// that needs torch lives in Python (kolo/torch/).
//
// Python API (unnamed collectives are issued by every rank in the same order
// and matched by call order; named ones in any order, negotiated):
//
//   kolo._C.init() -> Communicator          collective over the job (kolorun,
//                                           mpirun, srun, torchrun variables)
//   kolo._C.Error                           subclass of RuntimeError; every
//                                           kolo::Error ("kolo rank R: ...")
//   kolo._C.UNDEFINED                      split()'s color for no group (-1)
//   dtype codes  F32 F64 F16 BF16 I32 I64 U8   (ints 0..6, kolo::DType)
//   op codes     SUM AVERAGE MIN MAX PRODUCT   (ints 0..4, kolo::Op)
//   dtype_size(code) -> int, dtype_name(code) -> "f32"..., op_name(code) -> "sum"...,
//   op_supported(dtype, op) -> bool         (AVERAGE only on floating types)
//
//   class Communicator:
//     rank() size() local_rank() local_size() cross_rank() cross_size() -> int
//                                 (cross: this rank's host, number of hosts; kolo.h)
//     transport() -> "self"|"shm"|"tcp"|"hier"
//     valid() -> bool;  close()  (drops this handle's reference; the engine
//                                 stops once no Work or copy holds it)
//     allreduce(in_ptr, out_ptr, count, dtype, op, shape=[])   in_ptr == out_ptr: in place
//     broadcast(ptr, count, dtype, root, shape=[])             in place
//     allgather(in_ptr, out_ptr, count, dtype)             out holds size*count
//     allgatherv(in_ptr, out_ptr, counts: list[int], dtype)  counts same on every rank
//     reduce_scatter(in_ptr, out_ptr, count, dtype, op, shape=[])   in holds size*count
//       shape: the tensor's shape, checked across ranks with the call (kolo.h)
//     alltoall(in_ptr, out_ptr, count, dtype)              both hold size*count
//     alltoallv(in_ptr, send_counts, send_offsets, out_ptr, recv_counts, recv_offsets, dtype)
//       uneven blocks, in elements (offsets [] : packed); host memory only
//     alltoallv_counts(send_counts) -> list[int]   what each rank sends this one
//     barrier()
//     set_joined(on)   Horovod's join() for named operations (kolo.h)
//     each also as <name>_async(..., name="") -> Work; name: a named operation,
//       negotiated among ranks as Horovod's (kolo.h); kolo._C.DuplicateNameError
//       (a ValueError) when the name is in flight on this rank
//     split(color, key=0) -> Communicator     collective over this communicator,
//                                           as MPI_Comm_split; color < 0 (UNDEFINED):
//                                           no group, an invalid Communicator
//     subgroup(ranks: list[int]) -> Communicator   the listed ranks, in list order;
//                                           every rank passes the same list, ranks
//                                           not in it get an invalid Communicator
//     group(ranks: list[int], name) -> Communicator   the listed ranks, called by
//                                           them only, under a name they share
//                                           (torch's new_group)
//     world_ranks() -> list[int]            init()'s rank of each rank
//     every collective but barrier also takes device=-1, stream=0: device >= 0
//     says its buffers are CUDA memory of that device, ordered on `stream` (a
//     cudaStream_t as an int, e.g. torch.cuda.current_stream().cuda_stream;
//     0: the legacy default stream) — kolo.h's Place.
//     gpu_transport() -> "host"|"none"    how CUDA memory moves (kolo.h)
//   cuda_built() -> bool                   kolo has its GPU parts
//   fusion_threshold(default_bytes) -> int  KOLO_FUSION_THRESHOLD / HOROVOD_FUSION_THRESHOLD
//   free_port() -> int                     a port free on this host, in KOLO_PORT_RANGE when set (kolo.h)
//   iface_address() -> str                 this host's address on KOLO_IFACE's interface; "" when unset (kolo.h)
//   class Reducer(comm, entries: list[(count, dtype, device, stream)], bucket_bytes,
//                 first_bucket_bytes, op, prescale, postscale, wire (a dtype code: the
//                 compressed dtype, or -1), passes, vote_each_step, timeline_category, what)
//     — the gradient path (kolo/reducer.h): buckets() -> list[list[int]],
//     arrived(i) -> 0 accumulate | 1 final | 2 extra, ready(i, ptr (0: zeros),
//     in_place=False) -> bool, unready() -> list[int], started(), begin_finish(), finish(),
//     results(ptrs: list[int], 0: skip), active(), vote(active) -> int,
//     shadow(), reset(comm=None)
//   class Work:  wait() (rethrows the collective's error), test() -> bool, valid()
//   timeline_start(comm, path), timeline_stop(), timeline_on() -> bool,
//   timeline_now_ns() -> int, timeline_name_next(name),
//   timeline_span(category, name, begin_ns, end_ns, args_json="")   (kolo.h's kolo::timeline)
//
// Every blocking call and Work.wait() release the GIL; the buffers must stay
// alive (and, for async calls, untouched) until the call or Work completes —
// the Python layer keeps references for that. Pointers are plain ints, so the
// per-call cost is a few hundred nanoseconds of argument conversion.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <vector>

#include "kolo/kolo.h"
#include "kolo/reducer.h"

namespace py = pybind11;
using namespace pybind11::literals;

namespace {

using Ptr = std::uintptr_t;
using kolo::Shape;  // a tensor's shape, checked with the collective
using Release = py::call_guard<py::gil_scoped_release>;

const void* cin(Ptr p) { return reinterpret_cast<const void*>(p); }
void* out(Ptr p) { return reinterpret_cast<void*>(p); }

// Codes from Python are checked here so that a bad one is an error, not UB.
kolo::DType dt(int code) {
  if (code < 0 || code > static_cast<int>(kolo::DType::U8))
    throw kolo::Error("kolo: invalid dtype code " + std::to_string(code));
  return static_cast<kolo::DType>(code);
}
kolo::Op op(int code) {
  if (code < 0 || code > static_cast<int>(kolo::Op::Product))
    throw kolo::Error("kolo: invalid op code " + std::to_string(code));
  return static_cast<kolo::Op>(code);
}
std::size_t cnt(std::int64_t n) {
  if (n < 0) throw kolo::Error("kolo: negative element count " + std::to_string(n));
  return static_cast<std::size_t>(n);
}
using Counts = std::vector<std::int64_t>;
std::vector<std::size_t> counts(const Counts& v) {
  std::vector<std::size_t> r;
  r.reserve(v.size());
  for (auto n : v) r.push_back(cnt(n));
  return r;
}

using C = kolo::Communicator;

// A CUDA place leaves the caller's stream free (Place::stream_waits): every
// Python front (kolo.torch's handles, the process group's works, blocking
// calls) waits for a collective's Work before anything reads its result, so
// the stream goes on with its next kernels while the collective runs.
kolo::Place where(int device, Ptr stream) {
  if (device < 0) return kolo::Place::host();
  kolo::Place p = kolo::Place::cuda(device, reinterpret_cast<void*>(stream));
  p.stream_waits = false;
  return p;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "kolo's C++ core: collectives on raw buffers (see python/src/module.cc)";
  py::register_exception<kolo::Error>(m, "Error", PyExc_RuntimeError);
  // Horovod raises ValueError for a name already in flight (kolo.h).
  py::register_exception<kolo::DuplicateNameError>(m, "DuplicateNameError", PyExc_ValueError);

  m.attr("F32") = static_cast<int>(kolo::DType::F32);
  m.attr("F64") = static_cast<int>(kolo::DType::F64);
  m.attr("F16") = static_cast<int>(kolo::DType::F16);
  m.attr("BF16") = static_cast<int>(kolo::DType::BF16);
  m.attr("I32") = static_cast<int>(kolo::DType::I32);
  m.attr("I64") = static_cast<int>(kolo::DType::I64);
  m.attr("U8") = static_cast<int>(kolo::DType::U8);
  m.attr("SUM") = static_cast<int>(kolo::Op::Sum);
  m.attr("AVERAGE") = static_cast<int>(kolo::Op::Average);
  m.attr("MIN") = static_cast<int>(kolo::Op::Min);
  m.attr("MAX") = static_cast<int>(kolo::Op::Max);
  m.attr("PRODUCT") = static_cast<int>(kolo::Op::Product);
  m.attr("UNDEFINED") = kolo::kUndefined;

  m.def("dtype_size", [](int t) { return kolo::dtype_size(dt(t)); });
  m.def("dtype_name", [](int t) { return std::string(kolo::dtype_name(dt(t))); });
  m.def("op_name", [](int o) { return std::string(kolo::op_name(op(o))); });
  m.def("op_supported", [](int t, int o) { return kolo::op_supported(dt(t), op(o)); });
  m.def("cuda_built", [] { return kolo::cuda_built(); });

  py::class_<kolo::Work>(m, "Work")
      .def("wait", &kolo::Work::wait, Release())
      .def("test", &kolo::Work::test)
      .def("valid", &kolo::Work::valid);

  m.def("init", [] { return kolo::init(); }, Release());
  // Elastic jobs (kolo/elastic.py): kolo.h's kolo::elastic.
  m.def("elastic_enabled", [] { return kolo::elastic::enabled(); });
  m.def("elastic_generation", [](const C& c) { return kolo::elastic::generation(c); });
  m.def("elastic_latest_generation", [](const C& c) { return kolo::elastic::latest_generation(c); }, Release());

  m.def("timeline_start", [](const C& c, const std::string& path) { kolo::timeline::start(c, path); },
        Release());
  m.def("timeline_stop", [] { kolo::timeline::stop(); }, Release());
  m.def("timeline_on", [] { return kolo::timeline::on(); });
  m.def("timeline_now_ns", [] { return kolo::timeline::now_ns(); });
  m.def("timeline_name_next", [](const std::string& name) { kolo::timeline::name_next(name); });
  m.def("timeline_span",
        [](const std::string& category, const std::string& name, std::int64_t b, std::int64_t e,
           const std::string& args) { kolo::timeline::span(category.c_str(), name, b, e, args); },
        "category"_a, "name"_a, "begin_ns"_a, "end_ns"_a, "args_json"_a = "");

  m.def("fusion_threshold", [](std::int64_t d) { return kolo::fusion_threshold(cnt(d)); });
  m.def("free_port", &kolo::free_port);
  m.def("iface_address", &kolo::iface_address);

  using R = kolo::Reducer;
  using EntryTuple = std::tuple<std::int64_t, int, int, Ptr>;
  py::class_<R>(m, "Reducer")
      .def(py::init([](const C& c, const std::vector<EntryTuple>& list, std::int64_t bucket_bytes,
                       std::int64_t first_bucket_bytes, int o, double prescale, double postscale, int wire,
                       int passes, bool vote_each_step, const std::string& category, const std::string& what) {
             std::vector<kolo::ReducerEntry> entries;
             for (const auto& [n, t, d, st] : list) entries.push_back({cnt(n), dt(t), where(d, st)});
             kolo::ReducerOptions opts;
             opts.bucket_bytes = cnt(bucket_bytes);
             opts.first_bucket_bytes = cnt(first_bucket_bytes);
             opts.op = op(o);
             opts.prescale = prescale;
             opts.postscale = postscale;
             opts.wire = wire < 0 ? kolo::Wire::Same
                         : dt(wire) == kolo::DType::F16 ? kolo::Wire::F16
                         : dt(wire) == kolo::DType::BF16 ? kolo::Wire::BF16
                         : throw kolo::Error("kolo: a reducer compresses to f16 or bf16 only");
             opts.passes = passes;
             opts.vote_each_step = vote_each_step;
             opts.timeline_category = category;
             opts.what = what;
             return R(c, std::move(entries), std::move(opts));
           }), "comm"_a, "entries"_a, "bucket_bytes"_a, "first_bucket_bytes"_a, "op"_a, "prescale"_a = 1.0,
           "postscale"_a = 1.0, "wire"_a = -1, "passes"_a = 1, "vote_each_step"_a = false,
           "timeline_category"_a = std::string(), "what"_a = std::string("Reducer"))
      .def("buckets", [](const R& r) {
        std::vector<std::vector<std::size_t>> out;
        for (std::size_t b = 0; b < r.buckets(); ++b) out.push_back(r.bucket(b));
        return out;
      })
      .def("arrived", [](R& r, std::size_t i) { return static_cast<int>(r.arrived(i)); })
      .def("ready", [](R& r, std::size_t i, Ptr g, bool in_place) { return r.ready(i, out(g), in_place); },
           Release(), "i"_a, "grad"_a, "in_place"_a = false)
      .def("unready", &R::unready)
      .def("started", &R::started)
      .def("begin_finish", &R::begin_finish)
      .def("finish", &R::finish, Release())
      .def("results", [](R& r, const std::vector<Ptr>& outs) {
             for (std::size_t i = 0; i < outs.size(); ++i)
               if (outs[i]) r.result(i, out(outs[i]));
           }, Release())
      .def("active", &R::active)
      .def("vote", &R::vote, Release())
      .def("shadow", &R::shadow, Release())
      .def("reset", [](R& r, const C* c) { r.reset(c ? *c : C()); }, Release(), "comm"_a = nullptr);

  py::class_<C>(m, "Communicator")
      .def("rank", &C::rank)
      .def("size", &C::size)
      .def("local_rank", &C::local_rank)
      .def("local_size", &C::local_size)
      .def("cross_rank", &C::cross_rank)
      .def("cross_size", &C::cross_size)
      .def("transport", &C::transport)
      .def("gpu_transport", &C::gpu_transport)
      .def("failed", &C::failed)
      .def("valid", &C::valid)
      .def("close", [](C& c) { c = C(); }, Release())
      .def("allreduce",
           [](C& c, Ptr i, Ptr o, std::int64_t n, int t, int r, const Shape& s, int d, Ptr st) {
             c.allreduce(cin(i), out(o), cnt(n), dt(t), op(r), s, where(d, st));
           }, Release(), "in"_a, "out"_a, "count"_a, "dtype"_a, "op"_a, "shape"_a = Shape{}, "device"_a = -1,
           "stream"_a = Ptr{0})
      .def("allreduce_async",
           [](C& c, Ptr i, Ptr o, std::int64_t n, int t, int r, const Shape& s, int d, Ptr st, const std::string& nm) {
             return c.allreduce_async(cin(i), out(o), cnt(n), dt(t), op(r), s, where(d, st), nm);
           }, Release(), "in"_a, "out"_a, "count"_a, "dtype"_a, "op"_a, "shape"_a = Shape{}, "device"_a = -1,
           "stream"_a = Ptr{0}, "name"_a = std::string())
      .def("broadcast",
           [](C& c, Ptr p, std::int64_t n, int t, int root, const Shape& s, int d, Ptr st) {
             c.broadcast(out(p), cnt(n), dt(t), root, s, where(d, st));
           }, Release(), "data"_a, "count"_a, "dtype"_a, "root"_a, "shape"_a = Shape{}, "device"_a = -1,
           "stream"_a = Ptr{0})
      .def("broadcast_async",
           [](C& c, Ptr p, std::int64_t n, int t, int root, const Shape& s, int d, Ptr st, const std::string& nm) {
             return c.broadcast_async(out(p), cnt(n), dt(t), root, s, where(d, st), nm);
           }, Release(), "data"_a, "count"_a, "dtype"_a, "root"_a, "shape"_a = Shape{}, "device"_a = -1,
           "stream"_a = Ptr{0}, "name"_a = std::string())
      .def("allgather",
           [](C& c, Ptr i, Ptr o, std::int64_t n, int t, int d, Ptr st) {
             c.allgather(cin(i), out(o), cnt(n), dt(t), where(d, st));
           }, Release(), "in"_a, "out"_a, "count"_a, "dtype"_a, "device"_a = -1, "stream"_a = Ptr{0})
      .def("allgather_async",
           [](C& c, Ptr i, Ptr o, std::int64_t n, int t, int d, Ptr st, const std::string& nm) {
             return c.allgather_async(cin(i), out(o), cnt(n), dt(t), where(d, st), nm);
           }, Release(), "in"_a, "out"_a, "count"_a, "dtype"_a, "device"_a = -1, "stream"_a = Ptr{0}, "name"_a = std::string())
      .def("allgatherv",
           [](C& c, Ptr i, Ptr o, const std::vector<std::int64_t>& ns, int t, int d, Ptr st) {
             c.allgatherv(cin(i), out(o), counts(ns), dt(t), where(d, st));
           }, Release(), "in"_a, "out"_a, "counts"_a, "dtype"_a, "device"_a = -1, "stream"_a = Ptr{0})
      .def("allgatherv_async",
           [](C& c, Ptr i, Ptr o, const std::vector<std::int64_t>& ns, int t, int d, Ptr st, const std::string& nm) {
             return c.allgatherv_async(cin(i), out(o), counts(ns), dt(t), where(d, st), nm);
           }, Release(), "in"_a, "out"_a, "counts"_a, "dtype"_a, "device"_a = -1, "stream"_a = Ptr{0}, "name"_a = std::string())
      .def("reduce_scatter",
           [](C& c, Ptr i, Ptr o, std::int64_t n, int t, int r, const Shape& s, int d, Ptr st) {
             c.reduce_scatter(cin(i), out(o), cnt(n), dt(t), op(r), s, where(d, st));
           }, Release(), "in"_a, "out"_a, "count"_a, "dtype"_a, "op"_a, "shape"_a = Shape{}, "device"_a = -1,
           "stream"_a = Ptr{0})
      .def("reduce_scatter_async",
           [](C& c, Ptr i, Ptr o, std::int64_t n, int t, int r, const Shape& s, int d, Ptr st, const std::string& nm) {
             return c.reduce_scatter_async(cin(i), out(o), cnt(n), dt(t), op(r), s, where(d, st), nm);
           }, Release(), "in"_a, "out"_a, "count"_a, "dtype"_a, "op"_a, "shape"_a = Shape{}, "device"_a = -1,
           "stream"_a = Ptr{0}, "name"_a = std::string())
      .def("alltoall",
           [](C& c, Ptr i, Ptr o, std::int64_t n, int t, int d, Ptr st) {
             c.alltoall(cin(i), out(o), cnt(n), dt(t), where(d, st));
           }, Release(), "in"_a, "out"_a, "count"_a, "dtype"_a, "device"_a = -1, "stream"_a = Ptr{0})
      .def("alltoall_async",
           [](C& c, Ptr i, Ptr o, std::int64_t n, int t, int d, Ptr st, const std::string& nm) {
             return c.alltoall_async(cin(i), out(o), cnt(n), dt(t), where(d, st), nm);
           }, Release(), "in"_a, "out"_a, "count"_a, "dtype"_a, "device"_a = -1, "stream"_a = Ptr{0}, "name"_a = std::string())
      .def("alltoallv",
           [](C& c, Ptr i, const Counts& sc, const Counts& so, Ptr o, const Counts& rc, const Counts& ro, int t,
              int d, Ptr st) {
             c.alltoallv(cin(i), counts(sc), counts(so), out(o), counts(rc), counts(ro), dt(t), where(d, st));
           }, Release(), "in"_a, "send_counts"_a, "send_offsets"_a, "out"_a, "recv_counts"_a, "recv_offsets"_a,
           "dtype"_a, "device"_a = -1, "stream"_a = Ptr{0})
      .def("alltoallv_async",
           [](C& c, Ptr i, const Counts& sc, const Counts& so, Ptr o, const Counts& rc, const Counts& ro, int t,
              int d, Ptr st, const std::string& nm) {
             return c.alltoallv_async(cin(i), counts(sc), counts(so), out(o), counts(rc), counts(ro), dt(t),
                                      where(d, st), nm);
           }, Release(), "in"_a, "send_counts"_a, "send_offsets"_a, "out"_a, "recv_counts"_a, "recv_offsets"_a,
           "dtype"_a, "device"_a = -1, "stream"_a = Ptr{0}, "name"_a = std::string())
      .def("alltoallv_counts", [](C& c, const Counts& sc) { return c.alltoallv_counts(counts(sc)); }, Release(),
           "send_counts"_a)
      .def("barrier", &C::barrier, Release())
      .def("barrier_async", &C::barrier_async, Release())
      .def("set_joined", &C::set_joined, py::arg("on"), Release())
      .def("split", &C::split, py::arg("color"), py::arg("key") = 0, Release())
      .def("subgroup", &C::subgroup, py::arg("ranks"), Release())
      .def("group", &C::group, py::arg("ranks"), py::arg("name"), Release())
      .def("world_ranks", &C::world_ranks);
}
