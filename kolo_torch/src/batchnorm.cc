// SyncBatchNorm: batch normalization over the global batch of all ranks.
//
// Forward (training): each rank computes, per channel, its count n_r, mean
// m_r and M2_r = Σ(x − m_r)² (two passes: stable), and sends
// [n_r, n_r·m_r, M2_r + n_r·m_r²] — count, sum and sum of squares — in ONE
// f64 allreduce (Sum) of 1 + 2C values. From the sums: mean = S/n,
// var = SS/n − mean² (f64, so the cancellation costs nothing at f32 data
// precision). Each rank normalizes its own rows with the global mean and
// invstd; all ranks update the running statistics identically (unbiased
// variance, n/(n−1)).
//
// Backward: with xmu = x − mean, the gradient of the input needs two global
// per-channel sums, Σdy and Σdy·xmu, allreduced together (2C values):
//   dx = w·invstd · (dy − Σdy/n − xmu·invstd²·Σdy·xmu/n)
// The weight and bias gradients are this rank's own sums (Σdy·xmu·invstd,
// Σdy), which DistributedOptimizer then averages like any other gradient —
// PyTorch's SyncBatchNorm convention, under which averaging per-rank losses
// gives the gradient of the global loss.
//
// Half-precision inputs (bf16 autocast) are normalized in f32 and returned
// in their own dtype.
#include <fmt/format.h>
#include <torch/autograd.h>
#include <torch/nn/functional/batchnorm.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/utils.h>

#include "common.h"

namespace kolo::torch {

namespace {

using ::torch::Tensor;
using ::torch::autograd::AutogradContext;
using ::torch::autograd::variable_list;

// Every dimension but the channels.
std::vector<std::int64_t> reduce_dims(const Tensor& x) {
  std::vector<std::int64_t> d{0};
  for (std::int64_t i = 2; i < x.dim(); ++i) d.push_back(i);
  return d;
}

// [C] -> [1, C, 1, ...] to broadcast against x.
Tensor per_channel(const Tensor& v, const Tensor& x) {
  std::vector<std::int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
  shape[1] = v.size(0);
  return v.view(shape);
}

c10::ScalarType compute_type(const Tensor& x) {
  return x.scalar_type() == ::torch::kDouble ? ::torch::kDouble : ::torch::kFloat;
}

// y = (x − mean)·invstd·w + b with the global statistics; backward reduces
// the gradient statistics across ranks.
struct SyncBatchNormFunction : ::torch::autograd::Function<SyncBatchNormFunction> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight,
                               const Tensor& bias, const Tensor& mean, const Tensor& invstd,
                               double count, Communicator* comm) {
    const auto ct = compute_type(x);
    const Tensor xc = x.to(ct);
    Tensor scale = invstd;
    if (weight.defined()) scale = scale * weight.to(ct);
    Tensor y = (xc - per_channel(mean, xc)) * per_channel(scale, xc);
    if (bias.defined()) y = y + per_channel(bias.to(ct), xc);
    ctx->save_for_backward({x, weight, mean, invstd});
    ctx->saved_data["count"] = count;
    ctx->saved_data["comm"] = reinterpret_cast<std::int64_t>(comm);  // the module outlives backward
    ctx->saved_data["bias"] = bias.defined();
    return {y.to(x.scalar_type())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    const double count = ctx->saved_data["count"].toDouble();
    auto* comm = reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
    const auto ct = compute_type(x);
    const Tensor xc = x.to(ct);
    Tensor dy = grads[0].defined() ? grads[0].to(ct) : ::torch::zeros_like(xc);
    const auto dims = reduce_dims(xc);
    const Tensor xmu = xc - per_channel(mean, xc);
    const std::int64_t C = mean.size(0);
    // Local sums [Σdy | Σdy·xmu], kept for the parameter gradients, then summed over ranks.
    Tensor local = ::torch::cat({dy.sum(dims), (dy * xmu).sum(dims)}).to(::torch::kDouble).contiguous();
    Tensor global = local.clone();
    comm->allreduce(global.data_ptr<double>(), global.data_ptr<double>(),
                    static_cast<std::size_t>(global.numel()), DType::F64, Op::Sum, {},
                    detail::place_of(global, "SyncBatchNorm's gradient sums", comm->rank()));
    const Tensor g_dy = global.narrow(0, 0, C).to(ct), g_dy_xmu = global.narrow(0, C, C).to(ct);
    Tensor scale = invstd;
    if (weight.defined()) scale = scale * weight.to(ct);
    const Tensor dx = (dy - per_channel(g_dy / count, xc) -
                       xmu * per_channel(invstd * invstd * g_dy_xmu / count, xc)) *
                      per_channel(scale, xc);
    Tensor dw, db;
    if (weight.defined()) dw = (local.narrow(0, C, C).to(ct) * invstd).to(weight.scalar_type());
    if (ctx->saved_data["bias"].toBool()) db = local.narrow(0, 0, C).to(weight.defined() ? weight.scalar_type() : ct);
    return {dx.to(x.scalar_type()), dw, db, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(Communicator comm_, const ::torch::nn::BatchNormOptions& options_)
    : options(options_), comm(std::move(comm_)) {
  if (!comm.valid()) throw Error("kolo: SyncBatchNorm needs a communicator from kolo::init()");
  reset();
}

SyncBatchNormImpl::SyncBatchNormImpl(Communicator comm_, const ::torch::nn::BatchNormOptions& options_,
                                     std::vector<Tensor> adopt)
    : options(options_), comm(std::move(comm_)), adopt_(std::move(adopt)) {
  if (!comm.valid()) throw Error("kolo: SyncBatchNorm needs a communicator from kolo::init()");
  adopt_.resize(5);
  reset();
}

void SyncBatchNormImpl::reset() {
  const auto C = options.num_features();
  auto take = [&](std::size_t i, Tensor fresh) {
    return i < adopt_.size() && adopt_[i].defined() ? adopt_[i] : fresh;
  };
  if (options.affine()) {
    weight = register_parameter("weight", take(0, ::torch::ones({C})));
    bias = register_parameter("bias", take(1, ::torch::zeros({C})));
  } else {
    weight = register_parameter("weight", Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", Tensor(), /*requires_grad=*/false);
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", take(2, ::torch::zeros({C})));
    running_var = register_buffer("running_var", take(3, ::torch::ones({C})));
    num_batches_tracked = register_buffer("num_batches_tracked", take(4, ::torch::tensor(0, ::torch::kLong)));
  } else {
    running_mean = register_buffer("running_mean", Tensor());
    running_var = register_buffer("running_var", Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", Tensor());
  }
  adopt_.clear();
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options.track_running_stats()) return;
  ::torch::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "kolo::torch::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps()
         << ", momentum=";
  if (options.momentum())
    stream << *options.momentum();
  else
    stream << "None";
  stream << ", affine=" << options.affine() << ", track_running_stats=" << options.track_running_stats()
         << ", ranks=" << comm.size() << ")";
}

Tensor SyncBatchNormImpl::forward(const Tensor& input) {
  const int rank = comm.rank();
  if (input.dim() < 2 || input.dim() > 5 || input.size(1) != options.num_features())
    throw Error(detail::prefix(rank) +
                fmt::format("SyncBatchNorm({}): expected an input [N, {}, ...] of 2 to 5 dimensions, "
                            "got {}",
                            options.num_features(), options.num_features(), detail::describe(input)));
  const Place place = detail::place_of(input, "SyncBatchNorm's input", rank);
  namespace F = ::torch::nn::functional;
  if (!is_training()) {
    // Eval: running statistics, or (without them) this rank's batch; no communication.
    return F::batch_norm(input, running_mean, running_var,
                         F::BatchNormFuncOptions().weight(weight).bias(bias).training(
                             !options.track_running_stats()).eps(options.eps()));
  }

  const std::int64_t C = options.num_features();
  Tensor mean, invstd;
  double n = 0;
  {
    ::torch::NoGradGuard no_grad;
    const auto ct = compute_type(input);
    const Tensor x = input.to(ct);
    const auto dims = reduce_dims(x);
    const double n_local = static_cast<double>(x.numel() / C);
    // [count | sum | sum of squares] per channel, f64, in one allreduce.
    Tensor stats = ::torch::zeros({1 + 2 * C}, input.options().dtype(::torch::kDouble));
    stats[0] = n_local;
    if (n_local > 0) {
      const Tensor m = x.mean(dims).to(::torch::kDouble);
      const Tensor d = x - per_channel(m.to(ct), x);
      const Tensor m2 = (d * d).sum(dims).to(::torch::kDouble);
      stats.narrow(0, 1, C).copy_(m * n_local);
      stats.narrow(0, 1 + C, C).copy_(m2 + m * m * n_local);
    }
    comm.allreduce(stats.data_ptr<double>(), stats.data_ptr<double>(),
                   static_cast<std::size_t>(stats.numel()), DType::F64, Op::Sum, {}, place);
    n = stats[0].item<double>();
    if (n <= 1)
      throw Error(detail::prefix(rank) +
                  fmt::format("SyncBatchNorm({}): expected more than 1 value per channel over all "
                              "ranks in training, got {}",
                              C, n));
    const Tensor mean64 = stats.narrow(0, 1, C) / n;
    const Tensor var64 = (stats.narrow(0, 1 + C, C) / n - mean64 * mean64).clamp_min(0);
    mean = mean64.to(ct);
    invstd = (var64 + options.eps()).rsqrt().to(ct);
    if (options.track_running_stats()) {
      num_batches_tracked.add_(1);
      const double factor = options.momentum() ? *options.momentum()
                                               : 1.0 / static_cast<double>(num_batches_tracked.item<std::int64_t>());
      running_mean.mul_(1 - factor).add_(mean64.to(running_mean.scalar_type()), factor);
      running_var.mul_(1 - factor).add_((var64 * (n / (n - 1))).to(running_var.scalar_type()), factor);
    }
  }
  return SyncBatchNormFunction::apply(input, weight, bias, mean, invstd, n, &comm)[0];
}

namespace {

// The BatchNorm's options and tensors, if `m` is a BatchNorm1d/2d/3d.
template <typename Impl>
bool as_batchnorm(const std::shared_ptr<::torch::nn::Module>& m, ::torch::nn::BatchNormOptions& options,
                  std::vector<Tensor>& tensors) {
  auto bn = std::dynamic_pointer_cast<Impl>(m);
  if (!bn) return false;
  options = bn->options;
  tensors = {bn->weight, bn->bias, bn->running_mean, bn->running_var, bn->num_batches_tracked};
  return true;
}

}  // namespace

::torch::nn::Sequential convert_sync_batchnorm(Communicator comm, const ::torch::nn::Sequential& module) {
  ::torch::nn::Sequential out;
  const auto names = module->named_children().keys();
  std::size_t i = 0;
  for (const auto& any : *module) {
    const std::string& name = names.at(i++);
    const auto ptr = any.ptr();
    ::torch::nn::BatchNormOptions options(1);
    std::vector<Tensor> tensors;
    if (as_batchnorm<::torch::nn::BatchNorm1dImpl>(ptr, options, tensors) ||
        as_batchnorm<::torch::nn::BatchNorm2dImpl>(ptr, options, tensors) ||
        as_batchnorm<::torch::nn::BatchNorm3dImpl>(ptr, options, tensors)) {
      out->push_back(name, std::make_shared<SyncBatchNormImpl>(comm, options, std::move(tensors)));
    } else {
      out->push_back(name, any);
    }
  }
  out->train(module->is_training());
  return out;
}

}  // namespace kolo::torch
