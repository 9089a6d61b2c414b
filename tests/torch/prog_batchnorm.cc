// torch_rank_prog's BatchNorm modes: SyncBatchNorm against LibTorch's
// BatchNorm over the global batch (syncbn), and plain BatchNorm's buffers
// under DistributedOptimizer's broadcast_buffers (bufbcast).
#include "prog_common.h"

#include <numeric>

namespace prog {

// syncbn: SyncBatchNorm (via convert_sync_batchnorm) on each rank's rows of
// a global batch (--rows 5,3) against the reference, LibTorch's own BatchNorm
// over the whole batch, computed in the same process on every rank: outputs,
// gradients, running statistics.
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

namespace {

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

}  // namespace

// bufbcast: plain BatchNorm with broadcast_buffers: every rank's buffers
// equal those of a BatchNorm fed rank 0's batches alone.
int mode_bufbcast(kolo::Communicator& comm, const Args& a) {
  const int r = comm.rank();
  const bool on = !a.flag("off");
  torch::manual_seed(7);
  BnNet net;
  DistributedOptimizerOptions o;
  o.broadcast_buffers = on;
  auto opt = sgd_optimizer(comm, net, o);
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

}  // namespace prog
