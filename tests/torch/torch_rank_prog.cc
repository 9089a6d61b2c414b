// torch_rank_prog: the rank side of kolo_torch's tests. torch_test (the
// GoogleTest driver) runs it under kolorun in one of several modes and
// asserts on the files it writes, its output and its exit status.
//
//   equiv     K SGD steps on a fixed synthetic data set; rank r of N takes
//             rows [r·b, (r+1)·b) of each global batch of N·b rows, so a
//             1-rank run with --batch N·b sees the same samples. Checks after
//             broadcast_parameters and after every step that all ranks hold
//             bit-identical parameters; rank 0 writes the final ones (--out).
//             --print-overlap: each step's overlap mode (Overlap::Auto's trial).
//   resume    trains with DistributedSampler + LinearScalingWarmup, writes a
//             checkpoint at --ckpt-at; with --resume-from it loads one first;
//             rank 0 writes the final parameters.
//   ckpt_kill saves checkpoint v1, then limits the file size (RLIMIT_FSIZE)
//             and saves v2, which the kernel kills midway with SIGXFSZ.
//   ckpt_load loads a checkpoint (collectively) and prints a parameter value.
//   ckpt_save writes a small valid checkpoint.
//   unused    rank 1 (or every rank with --all) skips a layer in forward.
//   sparse    a sparse embedding gradient.
//   mismatch  rank 1 has a different layer shape at broadcast_parameters.
//   device    a parameter that is not on the CPU.
//   lr        LinearScalingWarmup on two param groups.
//   optstate  broadcast_optimizer_state makes rank-specific states equal.
//   tensors   broadcast / allreduce / allreduce_scalar on tensors.
//   bad_tensors  strided, sparse, non-CPU, bool and complex tensors refused.
//   loader    TorchSampler with torch::data::make_data_loader.
//   scaler    GradScaler with an inf forced on one rank (--inject loss: in
//             its loss; --inject grad: in one averaged gradient, after
//             synchronize(), so only the collective can spread it); prints
//             every step's decision and scale.
//   syncbn    SyncBatchNorm (via convert_sync_batchnorm) on each rank's rows
//             (--rows 5,3) against LibTorch's BatchNorm over the global batch
//             in the same process: outputs, gradients, running statistics.
//   bufbcast  plain BatchNorm with broadcast_buffers: every rank's buffers
//             equal those of a BatchNorm fed rank 0's batches alone.
//   join      uneven inputs (--batches 3,6 per rank) under kolo::torch::Join;
//   join_ref  the same training computed in one process (the reference).
//
// Exit status: 0 ok, 2 a check failed (message on stderr), 3 an exception
// (its text on stderr, which the driver asserts on).
#include <sys/resource.h>

#include <kolo/torch.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

namespace {

using kolo::torch::DistributedOptimizer;
using kolo::torch::DistributedOptimizerOptions;

struct Args {
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
  long num(const std::string& k, long def) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : std::stol(it->second);
  }
  double real(const std::string& k, double def) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : std::stod(it->second);
  }
  bool flag(const std::string& k) const { return kv.count(k) > 0; }
};

[[noreturn]] void check_failed(const std::string& what) {
  std::fprintf(stderr, "CHECK FAILED: %s\n", what.c_str());
  std::exit(2);
}

// conv + two linear layers: parameters of several shapes and both 4-D and 2-D grads.
struct Net : torch::nn::Module {
  explicit Net(int hidden = 16) {
    conv = register_module("conv", torch::nn::Conv2d(1, 4, 3));
    fc1 = register_module("fc1", torch::nn::Linear(4 * 6 * 6, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, 5));
  }
  torch::Tensor forward(torch::Tensor x, bool use_fc2 = true) {
    x = torch::relu(fc1(torch::flatten(torch::relu(conv(x)), 1)));
    return use_fc2 ? fc2(x) : x.narrow(1, 0, 5);
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

struct Data {
  torch::Tensor x, y;
};

Data make_data(std::int64_t n) {
  torch::manual_seed(1234);
  return {torch::randn({n, 1, 8, 8}), torch::randint(0, 5, {n}, torch::kInt64)};
}

// Every parameter, flattened, in named_parameters() order.
torch::Tensor flat_params(const torch::nn::Module& m) {
  std::vector<torch::Tensor> v;
  for (const auto& p : m.parameters()) v.push_back(p.detach().reshape({-1}));
  return torch::cat(v);
}

// All ranks must hold bit-identical parameters.
void check_identical(kolo::Communicator& comm, const torch::nn::Module& m, const std::string& when) {
  auto mine = flat_params(m).contiguous();
  auto root = mine.clone();
  kolo::torch::broadcast(comm, root, 0);
  std::int32_t differ = std::memcmp(mine.data_ptr(), root.data_ptr(), mine.numel() * 4) != 0;
  comm.allreduce(&differ, 1, kolo::Op::Max);
  if (differ) check_failed("parameters differ between ranks " + when);
}

void write_params(const torch::nn::Module& m, const std::string& path) {
  std::ofstream out(path);
  for (const auto& item : m.named_parameters()) {
    auto t = item.value().detach().contiguous().to(torch::kFloat64);
    out << item.key() << ' ' << t.numel() << '\n';
    auto* p = t.data_ptr<double>();
    char buf[64];
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      std::snprintf(buf, sizeof buf, "%.9g\n", p[i]);
      out << buf;
    }
  }
  if (!out) throw std::runtime_error("cannot write " + path);
}

DistributedOptimizerOptions optimizer_options(const Args& a) {
  DistributedOptimizerOptions o;
  o.backward_passes_per_step = static_cast<int>(a.num("accumulate", 1));
  const auto c = a.get("compression", "none");
  o.compression = c == "bf16"   ? kolo::torch::Compression::BF16
                  : c == "fp16" ? kolo::torch::Compression::FP16
                                : kolo::torch::Compression::None;
  o.gradient_predivide_factor = a.real("predivide", 1.0);
  o.reduction = a.flag("sum") ? kolo::torch::Reduction::Sum : kolo::torch::Reduction::Average;
  o.overlap = a.flag("no-overlap")        ? kolo::torch::Overlap::Never
              : a.flag("overlap-always") ? kolo::torch::Overlap::Always
                                         : kolo::torch::Overlap::Auto;
  o.overlap_trial_steps = static_cast<int>(a.num("overlap-trials", 5));
  o.find_unused_parameters = a.flag("find-unused");
  o.gradient_as_bucket_view = !a.flag("copy-grads");
  if (a.flag("small-buckets")) {  // many buckets: exercises their ordering
    o.first_bucket_cap_bytes = 64;
    o.bucket_cap_bytes = 1024;
  }
  return o;
}

// --clip: clip_grad_norm_ to this norm between synchronize() and the update;
// counts the steps that were clipped.
long clipped_steps = 0;
void maybe_clip(torch::nn::Module& net, const Args& a) {
  if (!a.flag("clip")) return;
  const double norm = torch::nn::utils::clip_grad_norm_(net.parameters(), a.real("clip", 1.0));
  if (norm > a.real("clip", 1.0)) ++clipped_steps;
}

int mode_equiv(kolo::Communicator& comm, const Args& a) {
  const int N = comm.size(), r = comm.rank();
  const long K = a.num("steps", 8), b = a.num("batch", 8);
  const long acc = a.num("accumulate", 1);
  if (b % acc) check_failed("batch must be a multiple of accumulate");
  const long global = b * N;
  Data d = make_data(4096);

  // Different initial parameters on purpose (broadcast_parameters must fix
  // them); rank 0's are those of the 1-rank baseline.
  torch::manual_seed(7 + static_cast<std::uint64_t>(r));
  Net net;
  kolo::torch::broadcast_parameters(comm, net, 0);
  check_identical(comm, net, "after broadcast_parameters");

  double lr = a.real("lr", 0.1);
  if (a.flag("sum")) lr /= N;  // Sum of N per-rank means = N × the global mean
  DistributedOptimizer opt(
      comm, net,
      std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(lr).momentum(0.9)),
      optimizer_options(a));

  if (a.flag("noncontig")) {  // gradients with transposed strides
    for (auto& p : net.parameters())
      if (p.dim() == 2)  // column-major, not a view (zero_grad() detaches in place)
        p.mutable_grad() = torch::empty_strided(p.sizes(), {1, p.size(0)}).zero_();
  }

  // --scaler: the loss is scaled by 2^k (exact), so the result must be the
  // baseline's; --clip then shows that unscale() ran before the clipping.
  kolo::torch::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  std::string modes;  // --print-overlap: each step's mode, + overlapped, - not
  for (long s = 0; s < K; ++s) {
    modes += opt.overlapping() ? '+' : '-';
    if (a.flag("grads-to-none")) {  // AccumulateGrad then makes fresh .grad tensors
      for (auto& p : net.parameters()) p.mutable_grad() = torch::Tensor();
    } else {
      opt.zero_grad(/*set_to_none=*/!a.flag("zero-memset"));
    }
    const long base = (s * global) % (d.x.size(0) - global) + r * b;
    const long micro = b / acc;
    for (long m = 0; m < acc; ++m) {
      auto rows = torch::arange(base + m * micro, base + (m + 1) * micro, torch::kInt64);
      auto out = net.forward(d.x.index_select(0, rows));
      auto loss = torch::nn::functional::cross_entropy(out, d.y.index_select(0, rows));
      if (a.flag("scaler")) loss = scaler.scale(loss);
      (acc > 1 ? loss / static_cast<double>(acc) : loss).backward();
    }
    if (a.flag("scaler")) {
      scaler.unscale(opt);
      maybe_clip(net, a);
      if (!scaler.step(opt)) check_failed("GradScaler skipped a step without inf/NaN");
      scaler.update();
      check_identical(comm, net, "after step " + std::to_string(s + 1));
      continue;
    }
    if (a.flag("synchronize")) {  // the two halves of step(), e.g. to clip in between
      opt.synchronize();
      opt.synchronize();  // a second call is a no-op
    }
    if (!a.flag("scaler") && a.flag("clip")) {  // the 1-rank baseline of --scaler --clip
      opt.synchronize();
      maybe_clip(net, a);
    }
    opt.step();
    check_identical(comm, net, "after step " + std::to_string(s + 1));
  }
  if (a.flag("noncontig"))
    for (auto& p : net.parameters())
      if (p.dim() == 2 && p.grad().is_contiguous()) check_failed("the test's gradients became contiguous");
  if (r == 0 && !a.get("out").empty()) write_params(net, a.get("out"));
  if (a.flag("print-overlap"))
    std::printf("rank %d: overlap %s, %s\n", r, modes.c_str(), opt.choosing_overlap() ? "choosing" : "chosen");
  if (a.flag("clip")) std::printf("rank %d: clipped %ld of %ld steps\n", r, clipped_steps, K);
  if (a.flag("scaler")) std::printf("rank %d: final scale %g\n", r, scaler.get_scale());
  return 0;
}

int mode_resume(kolo::Communicator& comm, const Args& a) {
  const long steps = a.num("steps", 30), b = a.num("batch", 8);
  const long ckpt_at = a.num("ckpt-at", 0);
  const std::string ckpt = a.get("ckpt");
  Data d = make_data(200);  // 200 samples: epochs end mid-run, and 200 % (N·b) may be != 0
  torch::manual_seed(7);
  Net net;
  kolo::torch::broadcast_parameters(comm, net, 0);
  DistributedOptimizer opt(
      comm, net,
      std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)),
      optimizer_options(a));
  kolo::torch::LinearScalingWarmup sched(opt.optimizer(), comm.size(), 10);
  kolo::torch::DistributedSampler sampler(comm, static_cast<std::size_t>(d.x.size(0)),
                                          {.shuffle = true, .seed = 5});
  // --scaler: grows every 3 steps, and an inf on rank 1 at --overflow-at
  // backs it off, so the scale and its growth tracker are mid-interval at
  // most checkpoints.
  const bool use_scaler = a.flag("scaler");
  kolo::torch::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  std::int64_t step = 0, epoch = 0;
  if (!a.get("resume-from").empty()) {
    auto st = kolo::torch::load_checkpoint(comm, a.get("resume-from"), net, opt);
    step = st.step;
    epoch = st.epoch;
    sampler.set_state(st.sampler);
    sched.set_step(step);
    if (use_scaler) {
      if (!st.scaler) check_failed("the checkpoint holds no GradScaler state");
      scaler.set_state(*st.scaler);
    }
  }
  for (; step < steps; ++epoch) {
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    while (step < steps) {
      auto batch = sampler.next(static_cast<std::size_t>(b));
      if (!batch) break;
      auto idx = kolo::torch::as_tensor(*batch);
      opt.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(net.forward(d.x.index_select(0, idx)),
                                                       d.y.index_select(0, idx));
      if (use_scaler) {
        if (comm.rank() == 1 && step == a.num("overflow-at", -1))
          loss = loss * std::numeric_limits<float>::infinity();
        scaler.scale(loss).backward();
        scaler.step(opt);
        scaler.update();
      } else {
        loss.backward();
        opt.step();
      }
      sched.step();
      ++step;
      if (step == ckpt_at && comm.rank() == 0) {
        kolo::torch::TrainState st{.epoch = epoch, .step = step, .sampler = sampler.state(), .scaler = std::nullopt};
        if (use_scaler) st.scaler = scaler.state();
        kolo::torch::save_checkpoint(ckpt, net, opt, st);
      }
      if (a.num("stop-at", 0) == step) return 0;  // "crash" right after the checkpoint
    }
  }
  check_identical(comm, net, "at the end");
  if (comm.rank() == 0) {
    write_params(net, a.get("out"));
    if (use_scaler) {  // two more "tensors" for the driver's byte comparison
      std::ofstream out(a.get("out"), std::ios::app);
      out << "scaler.scale 1\n" << scaler.get_scale() << "\nscaler.growth_tracker 1\n"
          << scaler.state().growth_tracker << '\n';
    }
  }
  return 0;
}

struct Big : torch::nn::Module {
  Big() { w = register_parameter("w", torch::zeros({a_size})); }
  static constexpr std::int64_t a_size = 1 << 22;  // 16 MiB of f32
  torch::Tensor w;
};

int mode_ckpt_kill(kolo::Communicator&, const Args& a) {
  const std::string ckpt = a.get("ckpt");
  Big m;
  torch::optim::SGD opt(m.parameters(), torch::optim::SGDOptions(0.1));
  torch::NoGradGuard g;
  m.w.fill_(1.0f);
  kolo::torch::save_checkpoint(ckpt, m, opt, {1, 10, {}, std::nullopt});
  std::printf("v1 saved\n");
  std::fflush(stdout);
  m.w.fill_(2.0f);
  rlimit lim{1 << 20, 1 << 20};  // 1 MiB: v2 dies with SIGXFSZ in the middle of its write
  setrlimit(RLIMIT_FSIZE, &lim);
  kolo::torch::save_checkpoint(ckpt, m, opt, {2, 20, {}, std::nullopt});
  std::printf("v2 saved (unexpected)\n");
  return 0;
}

int mode_ckpt_load(kolo::Communicator& comm, const Args& a) {
  Big m;
  torch::optim::SGD opt(m.parameters(), torch::optim::SGDOptions(0.1));
  auto st = kolo::torch::load_checkpoint(comm, a.get("ckpt"), m, opt);
  std::printf("rank %d loaded epoch %lld step %lld w[0]=%g w[last]=%g\n", comm.rank(),
              static_cast<long long>(st.epoch), static_cast<long long>(st.step), m.w[0].item<double>(),
              m.w[Big::a_size - 1].item<double>());
  return 0;
}

int mode_ckpt_save(kolo::Communicator& comm, const Args& a) {
  Big m;
  torch::optim::SGD opt(m.parameters(), torch::optim::SGDOptions(0.1));
  torch::NoGradGuard g;
  m.w.fill_(3.0f);
  if (comm.rank() == 0) kolo::torch::save_checkpoint(a.get("ckpt"), m, opt, {3, 30, {}, std::nullopt});
  return 0;
}

int mode_unused(kolo::Communicator& comm, const Args& a) {
  torch::manual_seed(7);
  Net net;
  DistributedOptimizer opt(
      comm, net, std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1)),
      optimizer_options(a));
  Data d = make_data(64);
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    const bool skip = a.flag("all") || comm.rank() == 1;
    auto rows = torch::arange(comm.rank() * 8, comm.rank() * 8 + 8, torch::kInt64);
    torch::nn::functional::cross_entropy(net.forward(d.x.index_select(0, rows), !skip),
                                         d.y.index_select(0, rows))
        .backward();
    opt.step();
    check_identical(comm, net, "after step " + std::to_string(s + 1));
  }
  std::printf("rank %d: unused-parameter steps done\n", comm.rank());
  return 0;
}

struct EmbNet : torch::nn::Module {
  EmbNet() {
    emb = register_module("emb", torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 4).sparse(true)));
    fc = register_module("fc", torch::nn::Linear(4, 2));
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc{nullptr};
};

int mode_sparse(kolo::Communicator& comm, const Args& a) {
  EmbNet net;
  DistributedOptimizer opt(
      comm, net, std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1)),
      optimizer_options(a));
  auto x = torch::tensor({1, 2, 3}, torch::kInt64);
  net.fc(net.emb(x)).sum().backward();
  opt.step();
  return 0;
}

// Not a CPU tensor. (Debian's LibTorch has no CUDA; a "meta" tensor takes
// the same path as a CUDA one.)
struct DeviceNet : torch::nn::Module {
  DeviceNet() { w = register_parameter("w", torch::empty({4}, torch::TensorOptions().device(torch::kMeta))); }
  torch::Tensor w;
};

int mode_device(kolo::Communicator& comm, const Args& a) {
  DeviceNet net;
  DistributedOptimizer opt(
      comm, net, std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1)),
      optimizer_options(a));
  return 0;
}

int mode_lr(kolo::Communicator&, const Args&) {
  auto p1 = torch::zeros({2}, torch::requires_grad()), p2 = torch::zeros({2}, torch::requires_grad());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{p1});
  groups.emplace_back(std::vector<torch::Tensor>{p2}, std::make_unique<torch::optim::SGDOptions>(0.5));
  torch::optim::SGD opt(std::move(groups), torch::optim::SGDOptions(0.1));
  auto lr = [&](std::size_t g) { return opt.param_groups()[g].options().get_lr(); };
  auto near = [](double a, double b) { return std::abs(a - b) < 1e-12; };
  kolo::torch::LinearScalingWarmup sched(opt, 4, 10);
  if (!near(lr(0), 0.1) || !near(lr(1), 0.5)) check_failed("lr at t=0");
  for (int t = 0; t < 5; ++t) sched.step();
  if (!near(lr(0), 0.25) || !near(lr(1), 1.25)) check_failed("lr at t=5 (half-way: 1 + 3/2)");
  for (int t = 5; t < 10; ++t) sched.step();
  if (!near(lr(0), 0.4) || !near(lr(1), 2.0)) check_failed("lr at t=10 (scaled 4x)");
  sched.step();
  if (!near(lr(0), 0.4)) check_failed("lr after the warm-up");
  sched.set_step(5);
  if (!near(lr(0), 0.25) || !near(sched.factor(), 2.5)) check_failed("lr after set_step(5)");
  torch::optim::SGD opt2(std::vector<torch::Tensor>{p1}, torch::optim::SGDOptions(0.1));
  kolo::torch::LinearScalingWarmup at_once(opt2, 4, 0);
  if (!near(opt2.param_groups()[0].options().get_lr(), 0.4)) check_failed("no warm-up: scaled at once");
  std::printf("lr schedule ok\n");
  return 0;
}

int mode_mismatch(kolo::Communicator& comm, const Args&) {
  Net net(comm.rank() == 1 ? 12 : 16);
  kolo::torch::broadcast_parameters(comm, net, 0);
  return 0;
}

int mode_optstate(kolo::Communicator& comm, const Args&) {
  torch::manual_seed(7);
  Net net;
  torch::optim::SGD opt(net.parameters(),
                        torch::optim::SGDOptions(0.1 * (comm.rank() + 1)).momentum(0.9));
  // Rank-specific momentum buffers (rank 0 has none at all on fc2.bias).
  for (auto& p : net.parameters()) p.mutable_grad() = torch::full_like(p, comm.rank() + 1.0);
  if (comm.rank() == 0) net.fc2->bias.mutable_grad() = torch::Tensor();
  opt.step();
  kolo::torch::broadcast_optimizer_state(comm, opt, 0);
  // Compare the serialized states.
  torch::serialize::OutputArchive ar;
  opt.save(ar);
  std::string bytes;
  ar.save_to([&](const void* p, std::size_t n) {
    bytes.append(static_cast<const char*>(p), n);
    return n;
  });
  // Momentum buffers in parameter order.
  std::vector<torch::Tensor> bufs;
  for (auto& p : net.parameters()) {
    auto it = opt.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    bufs.push_back(it == opt.state().end()
                       ? torch::full({1}, -1.0f)
                       : static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer().reshape({-1}));
  }
  auto mine = torch::cat(bufs);
  auto root = mine.clone();
  kolo::torch::broadcast(comm, root, 0);
  std::int32_t differ = !torch::equal(mine, root);
  differ |= opt.param_groups()[0].options().get_lr() != 0.1;
  comm.allreduce(&differ, 1, kolo::Op::Max);
  if (differ) check_failed("optimizer states differ after broadcast_optimizer_state");
  std::printf("rank %d: optimizer state equal\n", comm.rank());
  return 0;
}

int mode_tensors(kolo::Communicator& comm, const Args&) {
  const int r = comm.rank(), N = comm.size();
  // Broadcast of a 2-D tensor.
  auto m = torch::arange(12, torch::kFloat32).reshape({3, 4}) * (r + 1);
  kolo::torch::broadcast(comm, m, 0);
  if (!torch::equal(m, torch::arange(12, torch::kFloat32).reshape({3, 4}))) check_failed("broadcast");
  // broadcast_parameters takes a strided parameter (through its own copy).
  auto base = torch::arange(12, torch::kFloat32).reshape({3, 4}) * (r + 1);
  kolo::torch::broadcast_parameters(comm, kolo::torch::NamedTensors{{"w.t", base.t()}}, 0);
  if (!torch::equal(base, torch::arange(12, torch::kFloat32).reshape({3, 4})))
    check_failed("broadcast_parameters of a strided tensor");
  // Allreduce average and sum, f64 and i64.
  auto v = torch::full({5}, static_cast<double>(r + 1), torch::kFloat64);
  kolo::torch::allreduce(comm, v, kolo::Op::Average);
  if (!torch::allclose(v, torch::full({5}, (N + 1) / 2.0, torch::kFloat64))) check_failed("allreduce average");
  auto i = torch::full({3}, r + 1, torch::kInt64);
  kolo::torch::allreduce(comm, i, kolo::Op::Sum);
  if (i[0].item<std::int64_t>() != N * (N + 1) / 2) check_failed("allreduce sum i64");
  if (kolo::torch::allreduce_scalar(comm, r + 1.0, kolo::Op::Max) != N) check_failed("allreduce_scalar max");
  std::printf("rank %d: tensor collectives ok\n", r);
  return 0;
}

// Tensors the collectives refuse: each call must throw before any rank
// communicates (so the ranks stay in step); every message is printed for the
// driver to assert on, then a good allreduce shows the job goes on.
int mode_bad_tensors(kolo::Communicator& comm, const Args&) {
  const auto expect_error = [&](const char* what, const auto& call) {
    try {
      call();
    } catch (const kolo::Error& e) {
      std::printf("%s: %s\n", what, e.what());
      return;
    }
    check_failed(std::string(what) + " was accepted");
  };
  auto strided = torch::zeros({3, 4}).t();
  expect_error("non-contiguous allreduce", [&] { kolo::torch::allreduce(comm, strided); });
  expect_error("non-contiguous broadcast", [&] { kolo::torch::broadcast(comm, strided, 0); });
  auto sparse = torch::eye(3).to_sparse();
  expect_error("sparse allreduce", [&] { kolo::torch::allreduce(comm, sparse); });
  expect_error("sparse broadcast", [&] { kolo::torch::broadcast(comm, sparse, 0); });
  auto meta = torch::empty({4}, torch::TensorOptions().device(torch::kMeta));
  expect_error("meta allreduce", [&] { kolo::torch::allreduce(comm, meta); });
  auto flags = torch::ones({4}, torch::kBool);
  expect_error("bool allreduce", [&] { kolo::torch::allreduce(comm, flags, kolo::Op::Sum); });
  auto cplx = torch::zeros({2}, torch::kComplexFloat);
  expect_error("complex broadcast", [&] { kolo::torch::broadcast(comm, cplx, 0); });
  auto ok = torch::full({2}, 1.0f);
  kolo::torch::allreduce(comm, ok, kolo::Op::Sum);
  if (ok[0].item<float>() != comm.size()) check_failed("allreduce after the refused calls");
  std::printf("rank %d: bad tensors refused\n", comm.rank());
  return 0;
}

// A trivial data set for the loader test: sample i is the scalar i.
struct Range : torch::data::datasets::Dataset<Range> {
  explicit Range(std::size_t n) : n(n) {}
  torch::data::Example<> get(std::size_t i) override {
    auto t = torch::tensor(static_cast<std::int64_t>(i));
    return {t, t};
  }
  torch::optional<std::size_t> size() const override { return n; }
  std::size_t n;
};

int mode_loader(kolo::Communicator& comm, const Args&) {
  auto sampler = std::make_shared<kolo::torch::DistributedSampler>(comm, 50, kolo::torch::SamplerOptions{.shuffle = true, .seed = 3});
  auto loader = torch::data::make_data_loader(Range(50).map(torch::data::transforms::Stack<>()),
                                              kolo::torch::TorchSampler(sampler),
                                              torch::data::DataLoaderOptions().batch_size(4));
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    sampler->set_epoch(epoch);
    std::vector<std::size_t> got;
    for (auto& batch : *loader)
      for (std::int64_t k = 0; k < batch.data.size(0); ++k)
        got.push_back(static_cast<std::size_t>(batch.data[k].item<std::int64_t>()));
    if (got != sampler->indices()) check_failed("the data loader did not yield the sampler's shard");
  }
  std::printf("rank %d: loader ok\n", comm.rank());
  return 0;
}

// --- GradScaler ---------------------------------------------------------------

// Prints "rank R step S stepped|skipped scale X" for every step; checks that
// a skipped step leaves the parameters as they were, a taken one changes them,
// and that all ranks stay identical.
int mode_scaler(kolo::Communicator& comm, const Args& a) {
  const int r = comm.rank();
  const long K = a.num("steps", 10), b = 8;
  const long overflow_step = a.num("overflow-step", -1), overflow_rank = a.num("overflow-rank", 1);
  const std::string inject = a.get("inject", "grad");
  Data d = make_data(1024);
  torch::manual_seed(7);
  Net net;
  DistributedOptimizer opt(
      comm, net,
      std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)),
      optimizer_options(a));
  kolo::torch::GradScaler scaler({.init_scale = a.real("init-scale", 1024.0),
                                  .growth_factor = 2.0,
                                  .backoff_factor = 0.5,
                                  .growth_interval = a.num("growth-interval", 3)});
  for (long s = 0; s < K; ++s) {
    const bool here = s == overflow_step && r == overflow_rank;
    opt.zero_grad();
    auto rows = torch::arange((s * comm.size() + r) * b, (s * comm.size() + r + 1) * b, torch::kInt64);
    auto loss = torch::nn::functional::cross_entropy(net.forward(d.x.index_select(0, rows)),
                                                     d.y.index_select(0, rows));
    if (here && inject == "loss") loss = loss * std::numeric_limits<float>::infinity();
    scaler.scale(loss).backward();
    if (here && inject == "grad") {
      // After the allreduce, on this rank only: no other rank can see it
      // unless the GradScaler's own collective tells them.
      opt.synchronize();
      torch::NoGradGuard g;
      net.fc2->bias.mutable_grad()[0] = std::numeric_limits<float>::infinity();
    }
    const auto before = flat_params(net).clone();
    const bool stepped = scaler.step(opt);
    const bool changed = !torch::equal(before, flat_params(net));
    if (stepped != changed)
      check_failed("step " + std::to_string(s) + (stepped ? " stepped but left" : " was skipped but changed") +
                   " the parameters");
    scaler.update();
    std::printf("rank %d step %ld %s scale %g\n", r, s, stepped ? "stepped" : "skipped", scaler.get_scale());
    check_identical(comm, net, "after step " + std::to_string(s));
  }
  std::fflush(stdout);
  return 0;
}

// --- SyncBatchNorm --------------------------------------------------------------

std::vector<long> parse_list(const std::string& s) {
  std::vector<long> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) v.push_back(std::stol(item));
  return v;
}

// max|a−b| <= tol·max(1, max|b|), else a check failure naming `what`.
void expect_near(const torch::Tensor& got, const torch::Tensor& want, double tol, const std::string& what) {
  if (got.sizes() != want.sizes()) check_failed(what + ": shapes differ");
  if (got.numel() == 0) return;
  const double diff = (got.to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>();
  const double scale = std::max(1.0, want.to(torch::kDouble).abs().max().item<double>());
  if (!(diff <= tol * scale))
    check_failed(what + ": differs from the reference by " + std::to_string(diff));
}

// Every rank's rows of a global batch; the reference, LibTorch's own
// BatchNorm over the whole batch, is computed on every rank.
int mode_syncbn(kolo::Communicator& comm, const Args& a) {
  const int r = comm.rank();
  const auto rows = parse_list(a.get("rows", "5,3"));
  if (static_cast<int>(rows.size()) != comm.size()) check_failed("--rows needs one count per rank");
  const long total = std::accumulate(rows.begin(), rows.end(), 0L);
  const long first = std::accumulate(rows.begin(), rows.begin() + r, 0L);
  const int dim = static_cast<int>(a.num("dim", 2));
  const std::int64_t C = 3;
  std::vector<std::int64_t> shape = {total, C};
  if (dim == 2) shape.insert(shape.end(), {4, 5});
  if (dim == 3) shape.push_back(6);  // BatchNorm1d on [N, C, L]
  torch::manual_seed(11);
  // An offset mean and a spread, so that a wrong variance formula shows.
  const auto make_x = [&] { return torch::randn(shape, torch::kFloat32) * 2.5 + 4.0; };
  std::vector<torch::Tensor> xs, ws;
  for (int it = 0; it < 3; ++it) {
    xs.push_back(make_x());
    ws.push_back(torch::randn(shape));  // loss = Σ y ⊙ w
  }
  auto options = torch::nn::BatchNormOptions(C).momentum(0.3);
  torch::nn::Sequential ref, mine;
  if (dim == 2) {
    ref->push_back(torch::nn::BatchNorm2d(options));
    mine->push_back(torch::nn::BatchNorm2d(options));
  } else {
    ref->push_back(torch::nn::BatchNorm1d(options));
    mine->push_back(torch::nn::BatchNorm1d(options));
  }
  {  // non-trivial affine parameters, the same in both
    torch::NoGradGuard g;
    auto w = torch::rand({C}) + 0.5, bias = torch::randn({C});
    for (auto* m : {&ref, &mine}) {
      (*m)[0]->named_parameters()["weight"].copy_(w);
      (*m)[0]->named_parameters()["bias"].copy_(bias);
    }
  }
  auto sync = kolo::torch::convert_sync_batchnorm(comm, mine);
  if (!sync[0]->as<kolo::torch::SyncBatchNormImpl>()) check_failed("convert_sync_batchnorm left a BatchNorm");
  // Shared tensors: the converted module trains the original's.
  if (!sync[0]->named_parameters()["weight"].is_same(mine[0]->named_parameters()["weight"]))
    check_failed("convert_sync_batchnorm did not share the weight");
  // --bf16: the input in bf16 (as under autocast); the reference gets the
  // same rounded values in f32, and the output (bf16) is compared at bf16's
  // precision (8 bits: 2^-8 relative).
  const bool bf16 = a.flag("bf16");
  if (bf16)
    for (auto& x : xs) x = x.to(torch::kBFloat16).to(torch::kFloat32);
  const double tol = bf16 ? 1.0 / 64 : 1e-5;
  for (std::size_t it = 0; it < xs.size(); ++it) {
    const std::string when = " (iteration " + std::to_string(it) + ")";
    for (auto& p : ref->parameters()) p.mutable_grad() = torch::Tensor();
    for (auto& p : sync->parameters()) p.mutable_grad() = torch::Tensor();
    auto xr = xs[it].clone().requires_grad_(true);
    auto yr = ref->forward(xr);
    (yr * ws[it]).sum().backward();
    auto xl = xs[it].narrow(0, first, rows[r]).clone();
    if (bf16) xl = xl.to(torch::kBFloat16);
    xl.requires_grad_(true);
    auto yl = sync->forward(xl);
    if (bf16 && (yl.scalar_type() != torch::kBFloat16 || xl.scalar_type() != torch::kBFloat16))
      check_failed("a bf16 input must give a bf16 output");
    (yl * ws[it].narrow(0, first, rows[r])).sum().backward();
    expect_near(yl, yr.narrow(0, first, rows[r]), tol, "forward output" + when);
    expect_near(xl.grad(), xr.grad().narrow(0, first, rows[r]), tol, "input gradient" + when);
    // Each rank holds its rows' share of dL/dw; the sum over ranks is the whole.
    for (const char* name : {"weight", "bias"}) {
      auto g = sync[0]->named_parameters()[name].grad().clone();
      kolo::torch::allreduce(comm, g, kolo::Op::Sum);
      expect_near(g, ref[0]->named_parameters()[name].grad(), tol, std::string(name) + " gradient" + when);
    }
    for (const char* name : {"running_mean", "running_var"})
      expect_near(sync[0]->named_buffers()[name], ref[0]->named_buffers()[name], tol, std::string(name) + when);
    if (sync[0]->named_buffers()["num_batches_tracked"].item<std::int64_t>() != static_cast<std::int64_t>(it + 1))
      check_failed("num_batches_tracked" + when);
  }
  // A wrong input is refused on every rank, naming the problem.
  try {
    sync->forward(torch::zeros({4, C + 2}));
    check_failed("an input with the wrong number of channels was accepted");
  } catch (const kolo::Error& e) {
    std::printf("%s\n", e.what());
  }
  // Eval: running statistics, no communication (rank 0 runs it alone).
  ref->eval();
  sync->eval();
  if (r == 0) {
    torch::NoGradGuard g;
    expect_near(sync->forward(xs[0]), ref->forward(xs[0]), tol, "eval output");
  }
  std::printf("rank %d: SyncBatchNorm matches BatchNorm over the global batch (%ld of %ld rows)\n", r,
              rows[r], total);
  return 0;
}

// --- broadcast_buffers ---------------------------------------------------------------

struct BnNet : torch::nn::Module {
  BnNet() {
    bn = register_module("bn", torch::nn::BatchNorm1d(4));
    fc = register_module("fc", torch::nn::Linear(4, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc(bn(x)); }
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};

// Rank q's batch at step s (every rank can make every rank's).
torch::Tensor bn_batch(int q, long s) {
  torch::manual_seed(1000 + 100 * static_cast<std::uint64_t>(q) + static_cast<std::uint64_t>(s));
  return torch::randn({6, 4}) * (q + 1) + q;  // ranks' data differ in mean and spread
}

int mode_bufbcast(kolo::Communicator& comm, const Args& a) {
  const int r = comm.rank();
  const bool on = !a.flag("off");
  torch::manual_seed(7);
  BnNet net;
  DistributedOptimizerOptions o;
  o.broadcast_buffers = on;
  DistributedOptimizer opt(
      comm, net, std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1)), o);
  // The reference: the BatchNorm as rank 0 alone would have it.
  torch::nn::BatchNorm1d ref(4);
  bool ever_differ = false;
  for (long s = 0; s < 4; ++s) {
    opt.zero_grad();
    net.forward(bn_batch(r, s)).pow(2).mean().backward();
    opt.step();
    {
      torch::NoGradGuard g;
      ref->forward(bn_batch(0, s));
    }
    auto mine = torch::cat({net.bn->running_mean, net.bn->running_var}).contiguous();
    auto root = mine.clone();
    kolo::torch::broadcast(comm, root, 0);
    std::int32_t differ = !torch::equal(mine, root);
    comm.allreduce(&differ, 1, kolo::Op::Max);
    ever_differ = ever_differ || differ;
    if (on) {
      if (differ) check_failed("buffers differ between ranks after step " + std::to_string(s));
      expect_near(net.bn->running_mean, ref->running_mean, 1e-6, "running_mean");
      expect_near(net.bn->running_var, ref->running_var, 1e-6, "running_var");
      if (net.bn->num_batches_tracked.item<std::int64_t>() != s + 1) check_failed("num_batches_tracked");
    }
  }
  std::printf("rank %d: buffers %s\n", r, ever_differ ? "differ between ranks" : "equal rank 0's");
  return 0;
}

// --- Join ------------------------------------------------------------------------

constexpr long kJoinBatch = 8;
// Rank q's batch s: a block of the fixed data set.
torch::Tensor join_rows(int q, int size, long s) {
  const long base = (s * size + q) * kJoinBatch;
  return torch::arange(base, base + kJoinBatch, torch::kInt64);
}

std::unique_ptr<torch::optim::SGD> join_sgd(Net& net) {
  return std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
}

int mode_join(kolo::Communicator& comm, const Args& a) {
  const int r = comm.rank();
  const auto batches = parse_list(a.get("batches", "3,6"));
  if (static_cast<int>(batches.size()) != comm.size()) check_failed("--batches needs one count per rank");
  Data d = make_data(2048);
  torch::manual_seed(7);
  Net net;
  DistributedOptimizer opt(comm, net, join_sgd(net), optimizer_options(a));
  // --scaler: loss scaling through the Join; an inf in rank --overflow-rank's
  // loss at step --overflow-step makes every rank skip it, shadows included.
  const bool use_scaler = a.flag("scaler");
  kolo::torch::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  kolo::torch::Join join(opt, use_scaler ? &scaler : nullptr);
  for (long s = 0; s < batches[r]; ++s) {
    const int training = join.begin_step();
    long expect = 0;
    for (auto n : batches) expect += n > s;
    if (training != expect) check_failed("begin_step() counted " + std::to_string(training) + " ranks");
    opt.zero_grad();
    auto rows = join_rows(r, comm.size(), s);
    auto loss = torch::nn::functional::cross_entropy(net.forward(d.x.index_select(0, rows)),
                                                     d.y.index_select(0, rows));
    if (!use_scaler) {
      loss.backward();
      opt.step();
      continue;
    }
    if (s == a.num("overflow-step", -1) && r == a.num("overflow-rank", 1))
      loss = loss * std::numeric_limits<float>::infinity();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  }
  const auto shadowed = join.finish();
  if (use_scaler) {
    const double hi = kolo::torch::allreduce_scalar(comm, scaler.get_scale(), kolo::Op::Max);
    const double lo = kolo::torch::allreduce_scalar(comm, scaler.get_scale(), kolo::Op::Min);
    if (hi != lo) check_failed("the ranks' loss scales differ after Join::finish()");
    std::printf("rank %d: final scale %g\n", r, scaler.get_scale());
  }
  const long most = *std::max_element(batches.begin(), batches.end());
  if (shadowed != most - batches[r]) check_failed("finish() shadowed " + std::to_string(shadowed) + " steps");
  check_identical(comm, net, "after Join::finish()");
  std::printf("rank %d: %ld own steps, %lld shadowed\n", r, batches[r], static_cast<long long>(shadowed));
  if (r == 0 && !a.get("out").empty()) write_params(net, a.get("out"));
  return 0;
}

// One process: in step s the gradient is the mean loss over the batches of
// the ranks that still have one (equal batch sizes: the mean of their means);
// step --skip-step is left out (what an overflow does).
int mode_join_ref(kolo::Communicator&, const Args& a) {
  const auto batches = parse_list(a.get("batches", "3,6"));
  const int size = static_cast<int>(batches.size());
  Data d = make_data(2048);
  torch::manual_seed(7);
  Net net;
  auto sgd = join_sgd(net);
  const long most = *std::max_element(batches.begin(), batches.end());
  for (long s = 0; s < most; ++s) {
    std::vector<torch::Tensor> rows;
    for (int q = 0; q < size; ++q)
      if (batches[static_cast<std::size_t>(q)] > s) rows.push_back(join_rows(q, size, s));
    if (s == a.num("skip-step", -1)) continue;
    auto idx = torch::cat(rows);
    sgd->zero_grad();
    torch::nn::functional::cross_entropy(net.forward(d.x.index_select(0, idx)), d.y.index_select(0, idx))
        .backward();
    sgd->step();
  }
  write_params(net, a.get("out"));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: torch_rank_prog MODE [--key value | --flag]...\n");
    return 64;
  }
  const std::string mode = argv[1];
  Args a;
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) {
      std::fprintf(stderr, "bad argument %s\n", argv[i]);
      return 64;
    }
    k = k.substr(2);
    if (i + 1 < argc && std::strncmp(argv[i + 1], "--", 2) != 0)
      a.kv[k] = argv[++i];
    else
      a.kv[k] = "1";
  }
  torch::set_num_threads(1);
  try {
    auto comm = kolo::init();
    if (mode == "equiv") return mode_equiv(comm, a);
    if (mode == "resume") return mode_resume(comm, a);
    if (mode == "ckpt_kill") return mode_ckpt_kill(comm, a);
    if (mode == "ckpt_load") return mode_ckpt_load(comm, a);
    if (mode == "ckpt_save") return mode_ckpt_save(comm, a);
    if (mode == "unused") return mode_unused(comm, a);
    if (mode == "sparse") return mode_sparse(comm, a);
    if (mode == "mismatch") return mode_mismatch(comm, a);
    if (mode == "device") return mode_device(comm, a);
    if (mode == "lr") return mode_lr(comm, a);
    if (mode == "optstate") return mode_optstate(comm, a);
    if (mode == "tensors") return mode_tensors(comm, a);
    if (mode == "bad_tensors") return mode_bad_tensors(comm, a);
    if (mode == "loader") return mode_loader(comm, a);
    if (mode == "scaler") return mode_scaler(comm, a);
    if (mode == "syncbn") return mode_syncbn(comm, a);
    if (mode == "bufbcast") return mode_bufbcast(comm, a);
    if (mode == "join") return mode_join(comm, a);
    if (mode == "join_ref") return mode_join_ref(comm, a);
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 64;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return 3;
  }
}
