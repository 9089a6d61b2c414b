// SyncBatchNorm for LibTorch on the CPU (DDP's and Horovod's are GPU-only).
// Included by kolo/torch.h.
//
// In training, the batch statistics are those of the global batch: forward
// allreduces per channel the count, the sum and the sum of squares of every
// rank's batch in ONE collective (f64, 1 + 2·C values), and backward
// allreduces the two per-channel gradient sums (Σdy, Σdy·(x−mean)) in one
// more. Per-rank batch sizes may differ (a rank may even have 0 rows). Every
// rank thus computes the same mean and variance, and the same running
// statistics. In eval mode with running statistics it is a plain local
// batch norm, with no communication. Parameter and buffer names are
// BatchNorm's (weight, bias, running_mean, running_var, num_batches_tracked),
// so checkpoints move between the two.
//
// Like every collective, forward and backward must run on all ranks in the
// same order (all ranks train the same model).
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include "kolo/kolo.h"

namespace kolo::torch {

// Inputs [N, C] or [N, C, L] (as BatchNorm1d), [N, C, H, W] (2d), [N, C, D, H, W] (3d).
class SyncBatchNormImpl : public ::torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  SyncBatchNormImpl(Communicator comm, const ::torch::nn::BatchNormOptions& options);
  SyncBatchNormImpl(Communicator comm, std::int64_t num_features)
      : SyncBatchNormImpl(std::move(comm), ::torch::nn::BatchNormOptions(num_features)) {}
  // Registers these tensors (a BatchNorm's weight, bias, running_mean,
  // running_var, num_batches_tracked; undefined where it has none) instead
  // of fresh ones: the two modules then share them.
  SyncBatchNormImpl(Communicator comm, const ::torch::nn::BatchNormOptions& options,
                    std::vector<::torch::Tensor> adopt);
  void reset() override;
  void reset_running_stats();
  ::torch::Tensor forward(const ::torch::Tensor& input);
  void pretty_print(std::ostream& stream) const override;

  ::torch::nn::BatchNormOptions options;
  ::torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  Communicator comm;

 private:
  std::vector<::torch::Tensor> adopt_;  // consumed by the first reset()
};
// The module holder, as TORCH_MODULE(SyncBatchNorm) would make it (the macro
// names torch::nn unqualified, which inside kolo::torch is another namespace).
class SyncBatchNorm : public ::torch::nn::ModuleHolder<SyncBatchNormImpl> {
 public:
  using ::torch::nn::ModuleHolder<SyncBatchNormImpl>::ModuleHolder;
  using Impl = SyncBatchNormImpl;
};

// A copy of `module` in which every BatchNorm1d/2d/3d is replaced by a
// SyncBatchNorm that shares its parameters, buffers and options (so the
// original's tensors keep training); every other entry is shared as it is.
// Only a Sequential can be converted: a custom module holds its children in
// typed member variables, which nothing outside it can re-point (LibTorch's
// replace_module() changes only the registration) — build those with
// SyncBatchNorm directly. (A Sequential cannot hold a Sequential in LibTorch.)
::torch::nn::Sequential convert_sync_batchnorm(Communicator comm, const ::torch::nn::Sequential& module);

// Makes every rank's buffers (e.g. BatchNorm running statistics) equal to
// root's: DDP's broadcast_buffers, for plain BatchNorm. Collective. The
// DistributedOptimizer option broadcast_buffers does this in every step.
void broadcast_buffers(Communicator& comm, const ::torch::nn::Module& module, int root = 0);

}  // namespace kolo::torch
