// kolo::torch — data-parallel training for LibTorch programs on kolo's engine.
//
// The few lines that turn a single-process trainer into a data-parallel one:
//
//   auto comm = kolo::init();
//   kolo::torch::broadcast_parameters(comm, *model);                 // same start everywhere
//   kolo::torch::DistributedOptimizer opt(comm, *model,
//       std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(lr)));
//   kolo::torch::LinearScalingWarmup lr_sched(opt.optimizer(), comm.size(), /*warmup_steps=*/200);
//   kolo::torch::DistributedSampler sampler(comm, dataset_size, {.shuffle = true, .seed = 42});
//   for (epoch...) {
//     sampler.set_epoch(epoch);
//     while (auto idx = sampler.next(batch)) {
//       opt.zero_grad(); loss(...).backward(); opt.step(); lr_sched.step();
//     }
//     if (comm.rank() == 0) kolo::torch::save_checkpoint(path, *model, opt, {...});
//   }
//
// All communication goes through kolo::Communicator (never LibTorch's c10d).
// Every function taking a Communicator is collective: all ranks call it, in
// the same order. Errors are kolo::Error, naming the rank.
#pragma once

#include <torch/data/samplers/base.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kolo/kolo.h"
#include "kolo/reducer.h"
#include "kolo/torch/batchnorm.h"
#include "kolo/torch/grad_scaler.h"
#include "kolo/torch/join.h"
#include "kolo/torch/sampler.h"

namespace kolo::torch {

using NamedTensors = std::vector<std::pair<std::string, ::torch::Tensor>>;

// ---------------------------------------------------------------------------
// Tensor collectives, in place on dense, contiguous CPU tensors (a strided
// view, a sparse or a non-CPU tensor is an error naming the problem, as in
// torch.distributed). Supported dtypes: f32, f64, f16, bf16, i32, i64, u8
// (and bool for broadcast).

void broadcast(Communicator& comm, ::torch::Tensor& tensor, int root = 0);
void allreduce(Communicator& comm, ::torch::Tensor& tensor, Op op = Op::Average);
// For metrics: one double through an f64 allreduce.
double allreduce_scalar(Communicator& comm, double value, Op op = Op::Sum);

// Sample indices (e.g. DistributedSampler::indices() or a batch from next())
// as an int64 tensor for index_select.
::torch::Tensor as_tensor(const std::vector<std::size_t>& indices);

// Checks that every rank has the same names, shapes and dtypes (one allgather
// of a hash; on a mismatch the full lists are exchanged and every rank throws
// an error listing the differences), then broadcasts the parameters and then
// the buffers from root, in named_parameters()/named_buffers() order.
void broadcast_parameters(Communicator& comm, const ::torch::nn::Module& module, int root = 0);
void broadcast_parameters(Communicator& comm, const NamedTensors& tensors, int root = 0);

// Makes every rank's optimizer state (e.g. momentum buffers) and each param
// group's learning rate equal to root's. Works for any LibTorch optimizer: the
// state travels in LibTorch's own optimizer serialization.
void broadcast_optimizer_state(Communicator& comm, ::torch::optim::Optimizer& optimizer,
                               int root = 0);

// ---------------------------------------------------------------------------
// DistributedOptimizer (Horovod's shape): wraps and OWNS any LibTorch
// optimizer. During backward, a post-hook on each parameter's gradient
// accumulator copies the finished gradient into its bucket; when the last
// gradient of a bucket arrives, the bucket's allreduce_async starts at once.
// Buckets hold parameters in reverse registration order (the order backward
// usually produces them, as in DDP), after the first step in the order rank
// 0's backward produced them (DDP's rebuild; .grad views follow the move),
// and are started strictly in bucket order
// on every rank, so all ranks issue the same collectives in the same order
// even if their backward passes finish gradients in different orders. step()
// waits for the buckets, writes the reduced gradients back into .grad and
// calls the wrapped optimizer's step().

enum class Compression { None, FP16, BF16 };
// When a step's buckets are communicated: during backward, each as soon as it
// is full (Always), or all in step() (Never). Overlapping hides the
// communication behind backward where a core is free to run it; where every
// core computes (as many ranks as cores) it can cost more than it hides.
// Auto tries both in the first steps (2 warm-up steps, then
// overlap_trial_steps in each mode, alternating) and keeps the one whose
// median step time on the slowest rank was lower. Every mode gives the same
// results.
enum class Overlap { Auto, Always, Never };
enum class Reduction { Average, Sum };

struct DistributedOptimizerOptions {
  // Cap of every bucket but the first: KOLO_FUSION_THRESHOLD (or Horovod's
  // HOROVOD_FUSION_THRESHOLD) where set, else 25 MiB (kolo/reducer.h). 0: a
  // bucket per parameter.
  std::size_t bucket_cap_bytes = kolo::fusion_threshold(25u << 20);
  std::size_t first_bucket_cap_bytes = 1u << 20;  // the first bucket starts communicating early
  // Gradient accumulation: k backward passes per step(). Passes 1..k-1 only
  // accumulate into .grad locally; the k-th communicates.
  int backward_passes_per_step = 1;
  // Wire format: fp16/bf16 halve the bytes; reduced with Sum in that dtype
  // (kolo adds 16-bit floats in f32), converted back, then scaled.
  Compression compression = Compression::None;
  // Divide by this before the allreduce and by size/factor after (Average);
  // keeps fp16 sums in range.
  double gradient_predivide_factor = 1.0;
  Reduction reduction = Reduction::Average;
  // false: a parameter that received no gradient in a step is an error.
  // true: it counts as a zero gradient and is still communicated.
  bool find_unused_parameters = false;
  // See Overlap above.
  Overlap overlap = Overlap::Auto;
  int overlap_trial_steps = 5;  // per mode, under Auto
  // true: each parameter's .grad is left as a view into its bucket, so the
  // results land in .grad with no copy back (DDP's gradient_as_bucket_view).
  // Zero the gradients with DistributedOptimizer::zero_grad() (or
  // Module::zero_grad()): LibTorch 1.13's Optimizer::zero_grad() refuses to
  // detach_() views. A .grad that was replaced or reset is copied in and
  // re-pointed. false: gradients are copied in and the results copied back.
  bool gradient_as_bucket_view = true;
  // true: after the gradients of every step, the module's buffers (e.g.
  // BatchNorm running statistics) are broadcast from rank 0, so all ranks
  // hold rank 0's (DDP's broadcast_buffers). Needs the constructor that
  // takes the module. Not needed with SyncBatchNorm, whose statistics are
  // global already.
  bool broadcast_buffers = false;
};

class DistributedOptimizer {
 public:
  // Parameters (with requires_grad) and their names come from the module; the
  // optimizer must optimize (a subset of) them.
  DistributedOptimizer(Communicator comm, const ::torch::nn::Module& module,
                       std::unique_ptr<::torch::optim::Optimizer> optimizer,
                       DistributedOptimizerOptions options = {});
  DistributedOptimizer(Communicator comm, NamedTensors named_parameters,
                       std::unique_ptr<::torch::optim::Optimizer> optimizer,
                       DistributedOptimizerOptions options = {});
  DistributedOptimizer(DistributedOptimizer&&) noexcept;
  DistributedOptimizer& operator=(DistributedOptimizer&&) noexcept;
  ~DistributedOptimizer();  // waits for allreduces in flight, removes the hooks

  // Waits for all buckets (starting those not started), writes the reduced
  // gradients into .grad and calls the wrapped optimizer's step().
  void step();
  // The communication half of step(), without the optimizer step (e.g. for
  // gradient clipping between the two). step() after synchronize() only steps.
  void synchronize();
  // set_to_none (default, as in PyTorch 2): .grad becomes undefined, and the
  // next backward's fresh gradients are copied into the buckets once (the
  // least memory traffic). false: zeroes them (one memset per bucket).
  void zero_grad(bool set_to_none = true);
  // Ends a synchronized step without the optimizer update (what GradScaler
  // does on inf/NaN).
  void skip_step();

  // Elastic jobs: after a collective failed (or kolorun published a newer
  // membership), the caller forms the next communicator with kolo::init()
  // and hands it here. The step in progress is dropped — its allreduces
  // waited for and their errors discarded, the buckets emptied — and the
  // next step communicates on `comm` (the overlap trial starts over). The
  // wrapped optimizer, its state and the hooks stay; restore the committed
  // parameters and optimizer state and sync them from a survivor yourself
  // (kolo::torch::broadcast_parameters, broadcast_optimizer_state).
  void reform(Communicator comm);

  ::torch::optim::Optimizer& optimizer();
  const ::torch::optim::Optimizer& optimizer() const;
  const DistributedOptimizerOptions& options() const;
  Communicator& communicator();

  // Parameter names per bucket, in communication order (for tests and logs).
  std::vector<std::vector<std::string>> bucket_layout() const;
  // Whether the coming step communicates during backward: under
  // Overlap::Auto, the trial's mode for that step, then the decision.
  bool overlapping() const;
  // Overlap::Auto is still trying both modes.
  bool choosing_overlap() const;

 private:
  friend class Join;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------
// Learning-rate scaling by the global batch with gradual warm-up (Goyal et
// al. 2017): lr(t) = base_lr × (1 + (scale − 1) · min(t, W) / W), where
// base_lr is each param group's lr when the scheduler is constructed (the
// single-worker lr) and scale is usually comm.size(). W = 0: scaled at once.
// Sets every param group's lr at construction and on each step()/set_step().
class LinearScalingWarmup {
 public:
  LinearScalingWarmup(::torch::optim::Optimizer& optimizer, double scale,
                      std::int64_t warmup_steps);
  void step();                    // t += 1
  void set_step(std::int64_t t);  // e.g. after a resume
  std::int64_t current_step() const { return t_; }
  double factor() const;                // lr(t) / base_lr
  double lr(std::size_t group = 0) const;  // current lr of a param group

 private:
  void apply();
  ::torch::optim::Optimizer* optimizer_;
  std::vector<double> base_lrs_;
  double scale_;
  std::int64_t warmup_;
  std::int64_t t_ = 0;
};

// ---------------------------------------------------------------------------
// Checkpoints: one file with the model's parameters and buffers under their
// plain names (named_parameters()/named_buffers(), no "module." prefix), the
// optimizer state (LibTorch's serialization) and param-group lrs, the epoch,
// the global step and the sampler position. Written atomically: a temporary
// file in the same directory, fsync, rename, fsync of the directory — a
// write that dies midway leaves the previous checkpoint as it was. The file
// is a 32-byte header (magic "KOLOCKPT", version, payload length, CRC-32)
// followed by a torch::pickle_save payload, so truncated or foreign files are
// reported as such.

struct TrainState {
  std::int64_t epoch = 0;  // the epoch to continue with
  std::int64_t step = 0;   // global optimizer steps done
  SamplerState sampler;    // rank 0's sampler state (all ranks' are equal)
  // A GradScaler's state (scaler.state() when saving; when loading, set from
  // the file if it holds one: then scaler.set_state(*st.scaler)).
  std::optional<GradScalerState> scaler;
};

// Call on one rank (usually rank 0); not collective.
void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     const ::torch::optim::Optimizer& optimizer, const TrainState& state);
void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     const DistributedOptimizer& optimizer, const TrainState& state);

// Collective: root reads the file and broadcasts its bytes, every rank loads
// them into its module and optimizer. Every rank throws the same error (naming
// the file) when the file is missing, truncated or not a kolo checkpoint.
TrainState load_checkpoint(Communicator& comm, const std::string& path, ::torch::nn::Module& module,
                           ::torch::optim::Optimizer& optimizer, int root = 0);
TrainState load_checkpoint(Communicator& comm, const std::string& path, ::torch::nn::Module& module,
                           DistributedOptimizer& optimizer, int root = 0);
// Single process.
TrainState load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                           ::torch::optim::Optimizer& optimizer);

bool file_exists(const std::string& path);

// ---------------------------------------------------------------------------
// DistributedSampler as a torch::data sampler, for
// torch::data::make_data_loader(dataset, TorchSampler(sampler), options).
// It shares the DistributedSampler, so set_epoch() on yours before each
// epoch's loader->begin(); reset() rewinds except right after set_state().
class TorchSampler : public ::torch::data::samplers::Sampler<std::vector<std::size_t>> {
 public:
  explicit TorchSampler(std::shared_ptr<DistributedSampler> sampler) : s_(std::move(sampler)) {}
  void reset(::torch::optional<std::size_t> new_size = ::torch::nullopt) override {
    if (new_size && *new_size != s_->dataset_size())
      throw Error("kolo: TorchSampler cannot change the data set size");
    if (!s_->take_resume_pending()) s_->rewind();
  }
  ::torch::optional<std::vector<std::size_t>> next(std::size_t batch_size) override {
    auto b = s_->next(batch_size);
    if (!b) return ::torch::nullopt;
    return std::move(*b);
  }
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;
  DistributedSampler& sampler() { return *s_; }

 private:
  std::shared_ptr<DistributedSampler> s_;
};

}  // namespace kolo::torch
