// torch_rank_prog's training modes: DistributedOptimizer against one process
// (equiv), GradScaler across ranks (scaler), the parameters and optimizers it
// refuses (unused, sparse, device), LinearScalingWarmup (lr) and
// broadcast_optimizer_state (optstate).
#include "prog_common.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <type_traits>

namespace prog {

namespace {

// An optimizer's key for p's state: LibTorch up to 2.0 keys it by the
// TensorImpl's address as text (c10::guts::to_string, since removed), later
// ones by the address itself.
template <class State>
auto state_key(const State&, const torch::Tensor& p) {
  if constexpr (std::is_same_v<typename State::key_type, std::string>) {
    std::ostringstream text;
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

// --clip: clip_grad_norm_ to this norm between synchronize() and the update;
// counts the steps that were clipped.
long clipped_steps = 0;
void maybe_clip(torch::nn::Module& net, const Args& a) {
  if (!a.flag("clip")) return;
  const double norm = torch::nn::utils::clip_grad_norm_(net.parameters(), a.real("clip", 1.0));
  if (norm > a.real("clip", 1.0)) ++clipped_steps;
}

}  // namespace

// equiv: K SGD steps on a fixed synthetic data set; rank r of N takes rows
// [r·b, (r+1)·b) of each global batch of N·b rows, so a 1-rank run with
// --batch N·b sees the same samples. Checks after broadcast_parameters and
// after every step that all ranks hold bit-identical parameters; rank 0 writes
// the final ones (--out). --print-overlap: each step's overlap mode
// (Overlap::Auto's trial).
// --device cuda (the GPU machine; torch_test's TorchCuda variants): every
// tensor on that device, TF32 off so that a run differs from the CPU baseline
// by rounding only. --side-stream: everything runs on a stream other than the
// device's default one, as in a program that overlaps its input copies:
// kolo must take the gradients after that stream's work and hand the results
// back on it (the DistributedOptimizer's copies into .grad included).
int mode_equiv(kolo::Communicator& comm, const Args& a) {
  const int N = comm.size(), r = comm.rank();
  const long K = a.num("steps", 8), b = a.num("batch", 8);
  const long acc = a.num("accumulate", 1);
  if (b % acc) check_failed("batch must be a multiple of accumulate");
  const long global = b * N;
  const torch::Device dev(a.get("device", "cpu"));
  if (dev.is_cuda()) {
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setAllowTF32CuBLAS(false);
  }
  std::optional<c10::StreamGuard> side;  // before any work on the device
  if (a.flag("side-stream")) {
    if (!dev.is_cuda()) check_failed("--side-stream needs --device cuda");
    side.emplace(c10::impl::VirtualGuardImpl(dev.type()).getStreamFromGlobalPool(dev));
  }
  Data d = make_data(4096);
  d.x = d.x.to(dev);
  d.y = d.y.to(dev);

  // Different initial parameters on purpose (broadcast_parameters must fix
  // them); rank 0's are those of the 1-rank baseline.
  torch::manual_seed(7 + static_cast<std::uint64_t>(r));
  Net net;
  net.to(dev);
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
        p.mutable_grad() = torch::empty_strided(p.sizes(), {1, p.size(0)}, p.options()).zero_();
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
      auto rows = torch::arange(base + m * micro, base + (m + 1) * micro, torch::TensorOptions(torch::kInt64).device(dev));
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

// scaler: GradScaler with an inf forced on one rank (--inject loss: in its
// loss; --inject grad: in one averaged gradient, after synchronize(), so only
// the collective can spread it). Prints "rank R step S stepped|skipped scale X"
// for every step; checks that a skipped step leaves the parameters as they
// were, a taken one changes them, and that all ranks stay identical.
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

// unused: rank 1 (or every rank with --all) skips a layer in forward.
int mode_unused(kolo::Communicator& comm, const Args& a) {
  torch::manual_seed(7);
  Net net;
  auto opt = sgd_optimizer(comm, net, optimizer_options(a));
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

namespace {

struct EmbNet : torch::nn::Module {
  EmbNet() {
    emb = register_module("emb", torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 4).sparse(true)));
    fc = register_module("fc", torch::nn::Linear(4, 2));
  }
  torch::nn::Embedding emb{nullptr};
  torch::nn::Linear fc{nullptr};
};

}  // namespace

// sparse: a sparse embedding gradient.
int mode_sparse(kolo::Communicator& comm, const Args& a) {
  EmbNet net;
  auto opt = sgd_optimizer(comm, net, optimizer_options(a));
  auto x = torch::tensor({1, 2, 3}, torch::kInt64);
  net.fc(net.emb(x)).sum().backward();
  opt.step();
  return 0;
}

namespace {

// Not a CPU tensor. (Debian's LibTorch has no CUDA; a "meta" tensor takes
// the same path as a CUDA one.)
struct DeviceNet : torch::nn::Module {
  DeviceNet() { w = register_parameter("w", torch::empty({4}, torch::TensorOptions().device(torch::kMeta))); }
  torch::Tensor w;
};

}  // namespace

// device: a parameter that is not on the CPU.
int mode_device(kolo::Communicator& comm, const Args& a) {
  DeviceNet net;
  auto opt = sgd_optimizer(comm, net, optimizer_options(a));
  return 0;
}

// lr: LinearScalingWarmup on two param groups.
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

// optstate: broadcast_optimizer_state makes rank-specific states equal.
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
    auto it = opt.state().find(state_key(opt.state(), p));
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

}  // namespace prog
