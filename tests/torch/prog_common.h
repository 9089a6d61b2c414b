// What torch_rank_prog's modes share: the parsed arguments, the check that
// fails a run, the small network and data set most modes train on, and the
// comparisons of parameters between ranks. Each prog_*.cc holds one
// feature's modes; torch_rank_prog.cc's table names them all.
#pragma once

#include <kolo/torch.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace prog {

using kolo::torch::DistributedOptimizer;
using kolo::torch::DistributedOptimizerOptions;

// --key value and --flag (value "1") after the mode.
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

// Exit status 2: the driver tells a failed check from an exception (3).
[[noreturn]] inline void check_failed(const std::string& what) {
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

inline Data make_data(std::int64_t n) {
  torch::manual_seed(1234);
  return {torch::randn({n, 1, 8, 8}), torch::randint(0, 5, {n}, torch::kInt64)};
}

// Every parameter, flattened, in named_parameters() order.
inline torch::Tensor flat_params(const torch::nn::Module& m) {
  std::vector<torch::Tensor> v;
  for (const auto& p : m.parameters()) v.push_back(p.detach().reshape({-1}));
  return torch::cat(v);
}

// All ranks must hold bit-identical parameters.
inline void check_identical(kolo::Communicator& comm, const torch::nn::Module& m, const std::string& when) {
  auto mine = flat_params(m).to(torch::kCPU).contiguous();
  auto root = mine.clone();
  kolo::torch::broadcast(comm, root, 0);
  std::int32_t differ = std::memcmp(mine.data_ptr(), root.data_ptr(), mine.numel() * 4) != 0;
  comm.allreduce(&differ, 1, kolo::Op::Max);
  if (differ) check_failed("parameters differ between ranks " + when);
}

inline void write_params(const torch::nn::Module& m, const std::string& path) {
  std::ofstream out(path);
  for (const auto& item : m.named_parameters()) {
    auto t = item.value().detach().to(torch::kCPU, torch::kFloat64).contiguous();
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

inline DistributedOptimizerOptions optimizer_options(const Args& a) {
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

// Plain SGD (lr 0.1) under DistributedOptimizer: the optimizer of the modes
// that test what it refuses, skips or broadcasts rather than how it trains.
inline DistributedOptimizer sgd_optimizer(kolo::Communicator& comm, const torch::nn::Module& net,
                                          const DistributedOptimizerOptions& o) {
  return DistributedOptimizer(
      comm, net, std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1)), o);
}

// "5,3" -> {5, 3}: per-rank counts (--rows, --batches).
inline std::vector<long> parse_list(const std::string& s) {
  std::vector<long> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) v.push_back(std::stol(item));
  return v;
}

// max|a−b| <= tol·max(1, max|b|), else a check failure naming `what`.
inline void expect_near(const torch::Tensor& got, const torch::Tensor& want, double tol, const std::string& what) {
  if (got.sizes() != want.sizes()) check_failed(what + ": shapes differ");
  if (got.numel() == 0) return;
  const double diff = (got.to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>();
  const double scale = std::max(1.0, want.to(torch::kDouble).abs().max().item<double>());
  if (!(diff <= tol * scale))
    check_failed(what + ": differs from the reference by " + std::to_string(diff));
}

// The modes, by the file that holds them; each returns the exit status.
using Mode = int (*)(kolo::Communicator&, const Args&);
// prog_training.cc
int mode_equiv(kolo::Communicator&, const Args&);
int mode_scaler(kolo::Communicator&, const Args&);
int mode_unused(kolo::Communicator&, const Args&);
int mode_sparse(kolo::Communicator&, const Args&);
int mode_device(kolo::Communicator&, const Args&);
int mode_lr(kolo::Communicator&, const Args&);
int mode_optstate(kolo::Communicator&, const Args&);
// prog_checkpoint.cc
int mode_resume(kolo::Communicator&, const Args&);
int mode_ckpt_kill(kolo::Communicator&, const Args&);
int mode_ckpt_load(kolo::Communicator&, const Args&);
int mode_ckpt_save(kolo::Communicator&, const Args&);
// prog_tensors.cc
int mode_tensors(kolo::Communicator&, const Args&);
int mode_bad_tensors(kolo::Communicator&, const Args&);
int mode_mismatch(kolo::Communicator&, const Args&);
int mode_loader(kolo::Communicator&, const Args&);
// prog_batchnorm.cc
int mode_syncbn(kolo::Communicator&, const Args&);
int mode_bufbcast(kolo::Communicator&, const Args&);
// prog_join.cc
int mode_join(kolo::Communicator&, const Args&);
int mode_join_ref(kolo::Communicator&, const Args&);

}  // namespace prog
