// Tensor collectives, parameter and optimizer-state broadcast, and the
// cross-rank model check that guards them.
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>
#include <torch/version.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <map>
#include <sstream>

#include "common.h"

namespace kolo::torch {

namespace detail {

std::string prefix(int rank) { return fmt::format("kolo rank {}: ", rank); }

DType kolo_dtype(c10::ScalarType t, const std::string& what, int rank) {
  switch (t) {
    case c10::ScalarType::Float: return DType::F32;
    case c10::ScalarType::Double: return DType::F64;
    case c10::ScalarType::Half: return DType::F16;
    case c10::ScalarType::BFloat16: return DType::BF16;
    case c10::ScalarType::Int: return DType::I32;
    case c10::ScalarType::Long: return DType::I64;
    case c10::ScalarType::Byte:
    case c10::ScalarType::Bool: return DType::U8;
    default:
      throw Error(prefix(rank) + fmt::format("{} has dtype {}, which kolo does not communicate "
                                             "(f32, f64, f16, bf16, i32, i64, u8, bool)",
                                             what, c10::toString(t)));
  }
}

Place place_of(const ::torch::Tensor& t, const std::string& what, int rank) {
  if (t.is_sparse())
    throw Error(prefix(rank) + fmt::format("{} is sparse; kolo communicates dense tensors only", what));
  if (t.device().is_cpu()) return Place::host();
  if (!t.device().is_cuda())
    throw Error(prefix(rank) + fmt::format("{} is on {}, but kolo communicates CPU and CUDA tensors "
                                           "only; move it to the CPU",
                                           what, t.device().str()));
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  return Place::cuda(t.device().index(), current_stream(t)->native_handle());
#else
  throw Error(prefix(rank) + fmt::format("{} is on {}, but kolo_torch was built against LibTorch {}, "
                                         "whose streams it cannot name: build it against LibTorch "
                                         ">= 2.2 for CUDA tensors, or move the tensor to the CPU",
                                         what, t.device().str(), TORCH_VERSION));
#endif
}

c10::Stream current_stream(c10::Device cuda_device) {
  // Through c10's device-generic interface: no CUDA header is needed, so one
  // kolo_torch source serves CPU and CUDA LibTorch.
  return c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(cuda_device);
}

std::optional<c10::Stream> current_stream(const ::torch::Tensor& t) {
  if (!t.device().is_cuda()) return std::nullopt;
  return current_stream(t.device());
}

void order(const c10::Stream& earlier, const c10::Stream& later) {
  if (earlier == later) return;
  c10::Event done(earlier.device_type());
  done.record(earlier);
  done.block(later);
}

std::string describe(const ::torch::Tensor& t) {
  if (!t.defined()) return "undefined";
  return fmt::format("[{}] {}", fmt::join(t.sizes(), ", "), c10::toString(t.scalar_type()));
}

namespace {

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// One line per tensor: "param fc1.weight\t[128, 9216] Float".
std::string tensor_list(const NamedTensors& params, const NamedTensors& buffers) {
  std::string s;
  for (const auto& [n, t] : params) s += "parameter " + n + '\t' + describe(t) + '\n';
  for (const auto& [n, t] : buffers) s += "buffer " + n + '\t' + describe(t) + '\n';
  return s;
}

// name -> description, in order.
std::vector<std::pair<std::string, std::string>> parse_list(const std::string& s) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) {
    const auto tab = line.find('\t');
    out.emplace_back(line.substr(0, tab), tab == std::string::npos ? "" : line.substr(tab + 1));
  }
  return out;
}

}  // namespace

void check_same_tensors(Communicator& comm, const NamedTensors& params,
                        const NamedTensors& buffers, int root, const std::string& what) {
  const int size = comm.size();
  const int rank = comm.rank();
  if (root < 0 || root >= size)
    throw Error(prefix(rank) + fmt::format("{}: root {} is not a rank (size {})", what, root, size));
  if (size == 1) return;
  const std::string mine = tensor_list(params, buffers);
  std::vector<std::int64_t> hashes(static_cast<std::size_t>(size));
  hashes[static_cast<std::size_t>(rank)] = static_cast<std::int64_t>(fnv1a(mine));
  comm.allgather(hashes.data() + rank, hashes.data(), 1, DType::I64);
  bool same = true;
  for (auto h : hashes) same = same && h == hashes[0];
  if (same) return;

  // They differ: exchange the lists and explain.
  std::vector<std::int64_t> lens(static_cast<std::size_t>(size));
  lens[static_cast<std::size_t>(rank)] = static_cast<std::int64_t>(mine.size());
  comm.allgather(lens.data() + rank, lens.data(), 1, DType::I64);
  std::vector<std::size_t> counts(lens.begin(), lens.end());
  std::size_t total = 0;
  for (auto c : counts) total += c;
  std::string all(total, '\0');
  comm.allgatherv(mine.data(), all.data(), counts, DType::U8);

  std::vector<std::string> lists;
  std::size_t off = 0;
  for (auto c : counts) {
    lists.push_back(all.substr(off, c));
    off += c;
  }
  const auto ref = parse_list(lists[static_cast<std::size_t>(root)]);
  std::map<std::string, std::string> ref_map(ref.begin(), ref.end());
  std::string msg = fmt::format("{}: the models differ between ranks (compared with root rank {}):",
                                what, root);
  constexpr int kMaxLines = 20;
  int lines = 0, more = 0;
  auto add = [&](std::string line) {
    if (lines < kMaxLines) {
      msg += "\n  " + line;
      ++lines;
    } else {
      ++more;
    }
  };
  for (int r = 0; r < size; ++r) {
    if (r == root || hashes[static_cast<std::size_t>(r)] == hashes[static_cast<std::size_t>(root)])
      continue;
    const auto theirs = parse_list(lists[static_cast<std::size_t>(r)]);
    std::map<std::string, std::string> their_map(theirs.begin(), theirs.end());
    bool any = false;
    for (const auto& [name, desc] : theirs) {
      auto it = ref_map.find(name);
      if (it == ref_map.end()) {
        add(fmt::format("rank {} has {} {}, rank {} has no such tensor", r, name, desc, root));
        any = true;
      } else if (it->second != desc) {
        add(fmt::format("rank {}: {} is {}, on rank {} it is {}", r, name, desc, root, it->second));
        any = true;
      }
    }
    for (const auto& [name, desc] : ref)
      if (!their_map.count(name)) {
        add(fmt::format("rank {} lacks {} {} that rank {} has", r, name, desc, root));
        any = true;
      }
    if (!any) add(fmt::format("rank {} has the same tensors as rank {} in another order", r, root));
  }
  if (more) msg += fmt::format("\n  ... and {} more differences", more);
  throw Error(prefix(rank) + msg);
}

void broadcast_all(Communicator& comm, const NamedTensors& tensors, int root) {
  ::torch::NoGradGuard no_grad;
  struct Pending {
    ::torch::Tensor target, buf;
    Work work;
  };
  std::vector<Pending> pending;
  pending.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    const Place place = detail::place_of(t, "tensor '" + name + "'", comm.rank());
    const DType dt = detail::kolo_dtype(t.scalar_type(), "tensor '" + name + "'", comm.rank());
    ::torch::Tensor buf = t.is_contiguous() ? t : t.contiguous();
    pending.push_back({t, buf, {}});
    pending.back().work = comm.broadcast_async(buf.data_ptr(), static_cast<std::size_t>(buf.numel()),
                                               dt, root, {}, place);
  }
  std::exception_ptr first;
  for (auto& p : pending) {
    try {
      p.work.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
  for (auto& p : pending)
    if (!p.buf.is_same(p.target)) p.target.copy_(p.buf);
}

}  // namespace detail

using detail::broadcast_all;
using detail::prefix;

namespace {

NamedTensors to_vector(const ::torch::OrderedDict<std::string, ::torch::Tensor>& d) {
  NamedTensors v;
  v.reserve(d.size());
  for (const auto& item : d) v.emplace_back(item.key(), item.value());
  return v;
}

// The tensor collectives work in place, in the tensor's own memory, as
// torch.distributed's do; a strided view has no such memory to hand over, so
// it is refused (NCCL's "Tensors must be contiguous") rather than reduced
// through a hidden copy. Model parameters are different: broadcast_parameters
// owns that copy, since the caller never sees the tensors it moves.
// Returns the tensor's kolo dtype; `place` receives where it lives.
DType in_place_dtype(const ::torch::Tensor& t, const char* op, int rank, Place& place) {
  place = detail::place_of(t, "the tensor", rank);
  const DType dt = detail::kolo_dtype(t.scalar_type(), "the tensor", rank);
  if (!t.is_contiguous())
    throw Error(prefix(rank) + fmt::format(
                    "{}: the tensor is not contiguous (sizes [{}], strides [{}]); kolo works in "
                    "place in the tensor's memory: pass a contiguous tensor (t.contiguous(), then "
                    "copy the result back)",
                    op, fmt::join(t.sizes(), ", "), fmt::join(t.strides(), ", ")));
  return dt;
}

}  // namespace

void broadcast(Communicator& comm, ::torch::Tensor& tensor, int root) {
  Place place;
  const DType dt = in_place_dtype(tensor, "broadcast", comm.rank(), place);
  comm.broadcast(tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), dt, root, {}, place);
}

void allreduce(Communicator& comm, ::torch::Tensor& tensor, Op op) {
  Place place;
  const DType dt = in_place_dtype(tensor, "allreduce", comm.rank(), place);
  if (tensor.scalar_type() == c10::ScalarType::Bool || !op_supported(dt, op))
    throw Error(prefix(comm.rank()) + fmt::format("allreduce: op {} is not defined for {}",
                                                  op_name(op), c10::toString(tensor.scalar_type())));
  comm.allreduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<std::size_t>(tensor.numel()), dt, op, {},
                 place);
}

double allreduce_scalar(Communicator& comm, double value, Op op) {
  comm.allreduce(&value, &value, 1, DType::F64, op);
  return value;
}

::torch::Tensor as_tensor(const std::vector<std::size_t>& indices) {
  auto t = ::torch::empty({static_cast<std::int64_t>(indices.size())}, ::torch::kInt64);
  auto* p = t.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < indices.size(); ++i) p[i] = static_cast<std::int64_t>(indices[i]);
  return t;
}

void broadcast_parameters(Communicator& comm, const ::torch::nn::Module& module, int root) {
  const NamedTensors params = to_vector(module.named_parameters());
  const NamedTensors buffers = to_vector(module.named_buffers());
  detail::check_same_tensors(comm, params, buffers, root, "broadcast_parameters");
  if (comm.size() == 1) return;
  NamedTensors all = params;
  all.insert(all.end(), buffers.begin(), buffers.end());
  broadcast_all(comm, all, root);
}

void broadcast_buffers(Communicator& comm, const ::torch::nn::Module& module, int root) {
  const NamedTensors buffers = to_vector(module.named_buffers());
  detail::check_same_tensors(comm, {}, buffers, root, "broadcast_buffers");
  if (comm.size() == 1) return;
  broadcast_all(comm, buffers, root);
}

void broadcast_parameters(Communicator& comm, const NamedTensors& tensors, int root) {
  detail::check_same_tensors(comm, tensors, {}, root, "broadcast_parameters");
  if (comm.size() == 1) return;
  broadcast_all(comm, tensors, root);
}

void broadcast_optimizer_state(Communicator& comm, ::torch::optim::Optimizer& optimizer, int root) {
  if (comm.size() == 1) return;
  std::string bytes;
  auto& groups = optimizer.param_groups();
  // Header: serialized length and number of param groups.
  std::int64_t head[2] = {0, static_cast<std::int64_t>(groups.size())};
  if (comm.rank() == root) {
    ::torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    archive.save_to([&](const void* p, std::size_t n) {
      bytes.append(static_cast<const char*>(p), n);
      return n;
    });
    head[0] = static_cast<std::int64_t>(bytes.size());
  }
  comm.broadcast(head, 2, root);
  // A mismatch is detected on every rank (all see root's count and their own),
  // but only the differing ranks know it: agree on it before going on.
  std::int32_t bad = head[1] != static_cast<std::int64_t>(groups.size()) ? 1 : 0;
  comm.allreduce(&bad, 1, Op::Max);
  if (bad)
    throw Error(prefix(comm.rank()) +
                fmt::format("broadcast_optimizer_state: rank {} has {} param groups, some rank "
                            "has another number",
                            root, head[1]));
  bytes.resize(static_cast<std::size_t>(head[0]));
  comm.broadcast(bytes.data(), bytes.size(), DType::U8, root);
  std::vector<double> lrs(groups.size());
  for (std::size_t i = 0; i < groups.size(); ++i) lrs[i] = groups[i].options().get_lr();
  comm.broadcast(lrs.data(), lrs.size(), root);
  if (comm.rank() != root) {
    optimizer.state().clear();
    ::torch::serialize::InputArchive archive;
    // Root's state tensors go where this rank's parameters are (root's may be
    // on another GPU of the host), as restore() loads a checkpoint.
    c10::optional<::torch::Device> device;  // c10's: std::optional only from LibTorch 2.4
    for (const auto& g : groups)
      if (!g.params().empty()) {
        device = g.params().front().device();
        break;
      }
    archive.load_from(bytes.data(), bytes.size(), device);
    optimizer.load(archive);
    for (std::size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lrs[i]);
  }
}

}  // namespace kolo::torch
