// Checkpoints (atomic, self-checking files), the linear-scaling warm-up
// schedule and the torch::data sampler adapter's serialization.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>
#include <torch/serialize.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common.h"

namespace kolo::torch {

using detail::prefix;

// --- file format ----------------------------------------------------------
//
//   0  8  magic "KOLOCKPT"
//   8  4  format version (1), little-endian
//  12  4  reserved (0)
//  16  8  payload length in bytes
//  24  4  CRC-32 (zlib) of the payload
//  28  4  reserved (0)
//  32     payload: torch::pickle_save of a dict
//           format "kolo-checkpoint", model {name: tensor}, optimizer (u8
//           tensor holding LibTorch's optimizer archive), lrs [double],
//           epoch, step, sampler_epoch, sampler_position, sampler_start
//           (absent before elastic resharding: 0), and with a GradScaler
//           scaler_scale (double), scaler_growth_tracker (int)
//
// The payload is an ordinary PyTorch zip archive, so after skipping the 32
// header bytes Python's torch.load() can read it too.

namespace {

constexpr char kMagic[8] = {'K', 'O', 'L', 'O', 'C', 'K', 'P', 'T'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 32;

void put_le(std::string& s, std::size_t at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint64_t get_le(const std::string& s, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)])) << (8 * i);
  return v;
}

std::uint32_t crc32_of(const char* p, std::size_t n) {
  uLong c = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const auto chunk = static_cast<uInt>(std::min<std::size_t>(n, 1u << 30));
    c = crc32(c, reinterpret_cast<const Bytef*>(p), chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(c);
}

std::string sys_error(const std::string& what, const std::string& path) {
  return fmt::format("{} '{}': {}", what, path, std::strerror(errno));
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void write_all(int fd, const char* p, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw Error(sys_error("cannot write checkpoint", path));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Temp file in the same directory, fsync, rename over the target, fsync the
// directory: readers see the old file or the new one, never a mixture.
void write_atomically(const std::string& path, const std::string& header, const std::vector<char>& payload) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(::kolo::rank_prefix() + sys_error("cannot create", tmp));
  try {
    write_all(fd, header.data(), header.size(), tmp);
    write_all(fd, payload.data(), payload.size(), tmp);
    if (::fsync(fd) != 0) throw Error(sys_error("cannot fsync", tmp));
  } catch (const Error& e) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(::kolo::rank_prefix() + e.what());
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error(::kolo::rank_prefix() + sys_error("cannot close", tmp));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string msg = sys_error("cannot rename " + tmp + " to", path);
    ::unlink(tmp.c_str());
    throw Error(::kolo::rank_prefix() + msg);
  }
  const std::string dir = parent_dir(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // best effort: some file systems refuse fsync on directories
    ::close(dfd);
  }
}

// Reads and checks the file; returns the payload, or an error text (no rank prefix).
bool read_checkpoint_file(const std::string& path, std::string& payload, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = sys_error("cannot open checkpoint", path);
    return false;
  }
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    error = sys_error("cannot read checkpoint", path);
    return false;
  }
  const std::size_t magic_len = std::min(data.size(), sizeof kMagic);
  if (std::memcmp(data.data(), kMagic, magic_len) != 0 || data.empty()) {
    error = fmt::format("'{}' is not a kolo checkpoint (it does not start with \"KOLOCKPT\")", path);
    return false;
  }
  if (data.size() < kHeaderBytes) {
    error = fmt::format("checkpoint '{}' is truncated: {} bytes, shorter than its {}-byte header",
                        path, data.size(), kHeaderBytes);
    return false;
  }
  const auto version = get_le(data, 8, 4);
  if (version != kVersion) {
    error = fmt::format("checkpoint '{}' has format version {}; this kolo reads version {}", path,
                        version, kVersion);
    return false;
  }
  const auto len = get_le(data, 16, 8);
  const auto have = data.size() - kHeaderBytes;
  if (have < len) {
    error = fmt::format("checkpoint '{}' is truncated: the header promises {} payload bytes, the "
                        "file holds {}",
                        path, len, have);
    return false;
  }
  if (have > len) {
    error = fmt::format("checkpoint '{}' is corrupt: {} bytes after the {}-byte payload", path,
                        have - len, len);
    return false;
  }
  const auto crc = static_cast<std::uint32_t>(get_le(data, 24, 4));
  if (crc32_of(data.data() + kHeaderBytes, len) != crc) {
    error = fmt::format("checkpoint '{}' is corrupt: CRC-32 mismatch", path);
    return false;
  }
  payload = data.substr(kHeaderBytes);
  return true;
}

TrainState restore(const std::string& path, const std::string& payload, ::torch::nn::Module& module,
                   ::torch::optim::Optimizer& optimizer, const std::string& pfx) {
  auto fail = [&](const std::string& text) -> Error {
    return Error(pfx + fmt::format("checkpoint '{}': {}", path, text));
  };
  c10::IValue root;
  try {
    root = ::torch::pickle_load(std::vector<char>(payload.begin(), payload.end()));
  } catch (const std::exception& e) {
    throw fail(std::string("cannot parse the payload: ") + e.what());
  }
  if (!root.isGenericDict()) throw fail("the payload is not a dict");
  auto dict = root.toGenericDict();
  auto get = [&](const char* key) -> c10::IValue {
    if (!dict.contains(key)) throw fail(fmt::format("it has no '{}' entry", key));
    return dict.at(key);
  };
  if (!get("format").isString() || get("format").toStringRef() != "kolo-checkpoint")
    throw fail("it is not a kolo checkpoint payload");

  // Model: the module's tensors and the file's must match one to one.
  auto model = get("model").toGenericDict();
  std::vector<std::pair<std::string, ::torch::Tensor>> targets;
  for (const auto& item : module.named_parameters()) targets.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) targets.emplace_back(item.key(), item.value());
  std::string problems;
  for (const auto& [name, t] : targets) {
    if (!model.contains(name)) {
      problems += fmt::format("\n  the file lacks '{}' {}", name, detail::describe(t));
      continue;
    }
    const auto v = model.at(name).toTensor();
    if (v.sizes() != t.sizes() || v.scalar_type() != t.scalar_type())
      problems += fmt::format("\n  '{}' is {} in the file, {} in the model", name,
                              detail::describe(v), detail::describe(t));
  }
  for (const auto& entry : model) {
    const auto& name = entry.key().toStringRef();
    if (std::none_of(targets.begin(), targets.end(), [&](const auto& p) { return p.first == name; }))
      problems += fmt::format("\n  the model has no '{}' (in the file: {})", name,
                              detail::describe(entry.value().toTensor()));
  }
  if (!problems.empty()) throw fail("it does not fit the model:" + problems);
  {
    ::torch::NoGradGuard no_grad;
    for (auto& [name, t] : targets) t.copy_(model.at(name).toTensor());
  }

  // Optimizer: LibTorch's own archive, then the lrs it does not restore. Its
  // state tensors go where the model is: a file rank 0 wrote on cuda:0 loads
  // on the GPU of each rank (or on the CPU).
  const auto opt_bytes = get("optimizer").toTensor().contiguous();
  c10::optional<::torch::Device> device;  // c10's: std::optional only from LibTorch 2.4
  if (!targets.empty()) device = targets.front().second.device();
  try {
    optimizer.state().clear();
    ::torch::serialize::InputArchive archive;
    archive.load_from(static_cast<const char*>(opt_bytes.data_ptr()),
                      static_cast<std::size_t>(opt_bytes.numel()), device);
    optimizer.load(archive);
  } catch (const c10::Error& e) {
    throw fail(std::string("the optimizer state does not fit this optimizer: ") + e.what_without_backtrace());
  }
  const auto lrs = get("lrs").toDoubleVector();
  auto& groups = optimizer.param_groups();
  if (lrs.size() != groups.size())
    throw fail(fmt::format("it holds {} param groups, the optimizer has {}", lrs.size(), groups.size()));
  for (std::size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lrs[i]);

  TrainState st;
  st.epoch = get("epoch").toInt();
  st.step = get("step").toInt();
  st.sampler.epoch = static_cast<std::uint64_t>(get("sampler_epoch").toInt());
  st.sampler.position = static_cast<std::uint64_t>(get("sampler_position").toInt());
  if (dict.contains("sampler_start")) st.sampler.start = static_cast<std::uint64_t>(get("sampler_start").toInt());
  if (dict.contains("scaler_scale"))
    st.scaler = GradScalerState{get("scaler_scale").toDouble(), get("scaler_growth_tracker").toInt()};
  return st;
}

}  // namespace

void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     const ::torch::optim::Optimizer& optimizer, const TrainState& state) {
  c10::Dict<std::string, ::torch::Tensor> model;
  // Host copies of CUDA tensors: a checkpoint loads on any machine (restore copies to the model's device).
  for (const auto& item : module.named_parameters()) model.insert(item.key(), item.value().detach().cpu());
  for (const auto& item : module.named_buffers()) model.insert(item.key(), item.value().detach().cpu());

  std::string opt_bytes;
  {
    ::torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    archive.save_to([&](const void* p, std::size_t n) {
      opt_bytes.append(static_cast<const char*>(p), n);
      return n;
    });
  }
  auto opt_tensor = ::torch::empty({static_cast<std::int64_t>(opt_bytes.size())}, ::torch::kUInt8);
  std::memcpy(opt_tensor.data_ptr(), opt_bytes.data(), opt_bytes.size());
  std::vector<double> lrs;
  for (const auto& g : optimizer.param_groups()) lrs.push_back(g.options().get_lr());

  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("format", std::string("kolo-checkpoint"));
  dict.insert("model", model);
  dict.insert("optimizer", opt_tensor);
  dict.insert("lrs", c10::List<double>(lrs));
  dict.insert("epoch", state.epoch);
  dict.insert("step", state.step);
  dict.insert("sampler_epoch", static_cast<std::int64_t>(state.sampler.epoch));
  dict.insert("sampler_position", static_cast<std::int64_t>(state.sampler.position));
  dict.insert("sampler_start", static_cast<std::int64_t>(state.sampler.start));
  if (state.scaler) {
    dict.insert("scaler_scale", state.scaler->scale);
    dict.insert("scaler_growth_tracker", state.scaler->growth_tracker);
  }
  const std::vector<char> payload = ::torch::pickle_save(c10::IValue(dict));

  std::string header(kHeaderBytes, '\0');
  std::memcpy(header.data(), kMagic, sizeof kMagic);
  put_le(header, 8, kVersion, 4);
  put_le(header, 16, payload.size(), 8);
  put_le(header, 24, crc32_of(payload.data(), payload.size()), 4);
  write_atomically(path, header, payload);
}

void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     const DistributedOptimizer& optimizer, const TrainState& state) {
  save_checkpoint(path, module, optimizer.optimizer(), state);
}

TrainState load_checkpoint(Communicator& comm, const std::string& path, ::torch::nn::Module& module,
                           ::torch::optim::Optimizer& optimizer, int root) {
  std::string payload, error;
  std::int64_t head[2] = {0, 0};  // {ok, bytes}
  if (comm.rank() == root) {
    const bool ok = read_checkpoint_file(path, payload, error);
    head[0] = ok ? 1 : 0;
    head[1] = static_cast<std::int64_t>(ok ? payload.size() : error.size());
  }
  if (comm.size() > 1) {
    comm.broadcast(head, 2, root);
    std::string& body = head[0] ? payload : error;
    body.resize(static_cast<std::size_t>(head[1]));
    comm.broadcast(body.data(), body.size(), DType::U8, root);
  }
  if (!head[0]) throw Error(prefix(comm.rank()) + error);
  return restore(path, payload, module, optimizer, prefix(comm.rank()));
}

TrainState load_checkpoint(Communicator& comm, const std::string& path, ::torch::nn::Module& module,
                           DistributedOptimizer& optimizer, int root) {
  return load_checkpoint(comm, path, module, optimizer.optimizer(), root);
}

TrainState load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                           ::torch::optim::Optimizer& optimizer) {
  std::string payload, error;
  if (!read_checkpoint_file(path, payload, error)) throw Error(::kolo::rank_prefix() + error);
  return restore(path, payload, module, optimizer, ::kolo::rank_prefix());
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// --- LinearScalingWarmup ------------------------------------------------------

LinearScalingWarmup::LinearScalingWarmup(::torch::optim::Optimizer& optimizer, double scale,
                                         std::int64_t warmup_steps)
    : optimizer_(&optimizer), scale_(scale), warmup_(std::max<std::int64_t>(0, warmup_steps)) {
  for (const auto& g : optimizer.param_groups()) base_lrs_.push_back(g.options().get_lr());
  apply();
}

double LinearScalingWarmup::factor() const {
  if (warmup_ == 0 || t_ >= warmup_) return scale_;
  return 1.0 + (scale_ - 1.0) * static_cast<double>(t_) / static_cast<double>(warmup_);
}

double LinearScalingWarmup::lr(std::size_t group) const { return base_lrs_.at(group) * factor(); }

void LinearScalingWarmup::apply() {
  auto& groups = optimizer_->param_groups();
  const double f = factor();
  for (std::size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i)
    groups[i].options().set_lr(base_lrs_[i] * f);
}

void LinearScalingWarmup::step() {
  ++t_;
  apply();
}

void LinearScalingWarmup::set_step(std::int64_t t) {
  t_ = t;
  apply();
}

// --- TorchSampler ---------------------------------------------------------------

void TorchSampler::save(::torch::serialize::OutputArchive& archive) const {
  archive.write("kolo_sampler_epoch", ::torch::tensor(static_cast<std::int64_t>(s_->epoch())));
  archive.write("kolo_sampler_position", ::torch::tensor(static_cast<std::int64_t>(s_->position())));
  archive.write("kolo_sampler_start", ::torch::tensor(static_cast<std::int64_t>(s_->state().start)));
}

void TorchSampler::load(::torch::serialize::InputArchive& archive) {
  ::torch::Tensor e, p, start;
  archive.read("kolo_sampler_epoch", e);
  archive.read("kolo_sampler_position", p);
  const bool resharded = archive.try_read("kolo_sampler_start", start);  // absent in older archives
  s_->set_state({static_cast<std::uint64_t>(e.item<std::int64_t>()),
                 static_cast<std::uint64_t>(p.item<std::int64_t>()),
                 resharded ? static_cast<std::uint64_t>(start.item<std::int64_t>()) : 0});
}

}  // namespace kolo::torch
