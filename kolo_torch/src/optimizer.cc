// DistributedOptimizer: gradient buckets filled by autograd hooks and
// allreduced while backward is still running.
//
// How a step goes
// ---------------
// At construction the parameters (requires_grad, deduplicated) are laid out
// in reverse registration order — the order in which backward usually
// finishes them — into buckets: a small first one (first_bucket_cap_bytes, so
// communication starts early) and then buckets of up to bucket_cap_bytes; a
// bucket holds one dtype. Each parameter's gradient accumulator (the
// AccumulateGrad node that writes .grad) gets a post-hook.
//
// During backward the hook fires once per parameter and pass. On the last
// pass of a step (backward_passes_per_step = k; passes 1..k-1 just accumulate
// into .grad) it copies .grad into the parameter's slot of its bucket; when a
// bucket's last slot is filled, the bucket is *ready*. Ready buckets are
// started strictly in bucket order (bucket i+1 waits for bucket i), so every
// rank issues the same allreduces in the same order even when their backward
// passes finish gradients in different orders (the kolo contract). The first
// hook of a pass also queues an end-of-backward callback with the autograd
// engine that counts the pass.
//
// step() (via synchronize()) fills what backward did not — parameters that
// got a gradient only in earlier passes, or none at all (zeros with
// find_unused_parameters, else an error after the collectives have been
// completed, so that no peer is left waiting mid-step) — starts the
// remaining buckets in order, waits for all of them, scales, writes the
// results into .grad and calls the wrapped optimizer. Errors found inside
// hooks (sparse or non-CPU gradients) are kept and thrown from step(), since
// the autograd engine would wrap or lose them.
//
// Overlap::Never leaves every bucket to step(); Overlap::Auto alternates the
// two ways in the first steps and keeps the faster (overlap_trial.h).
//
// Options that add collectives to a step, always in this order after the
// buckets: broadcast_buffers (one broadcast per buffer, from rank 0); under
// Overlap::Auto, once, the trial's decision (one allreduce of two doubles).
//
// Timeline marks (README "Timeline"; the same as kolo.torch's): "bucket i"
// from its allreduce's issue to its completion as synchronize() sees it,
// "backward" from the step's first gradient to synchronize(), "synchronize"
// and "optimizer step". Whether to record is decided at the first gradient
// of a step (t_first != 0), so with the timeline off each place that records
// pays one test: of timeline::on() in the gradient hook and in step(), of the
// member t_first where buckets are issued and waited for.
//
// Join (uneven inputs) lives at the end of this file: a finished rank runs
// shadow steps — the same bucket allreduces with zeros, the same buffer
// broadcasts, the same optimizer update — and while a Join is attached the
// buckets are summed and divided by the number of ranks that trained.
#include <fmt/format.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <unordered_set>

#include "common.h"
#include "overlap_trial.h"

namespace kolo::torch {

using detail::prefix;

struct DistributedOptimizer::Impl {
  struct Param {
    std::string name;
    ::torch::Tensor tensor;
    std::size_t bucket = 0;
    std::int64_t offset = 0;  // elements into the bucket
    std::int64_t numel = 0;
    // std::shared_ptr up to torch 2.x's switch to c10::intrusive_ptr: whichever
    // impl::grad_accumulator returns in the LibTorch this is built against.
    decltype(::torch::autograd::impl::grad_accumulator(std::declval<const ::torch::Tensor&>())) accumulator;
    std::uintptr_t hook_key = 0;
    bool seen = false;   // received a gradient in some pass of this step
    bool ready = false;  // copied into its bucket for this step
    ::torch::Tensor view;   // the parameter's slot of its bucket, shaped like it
    bool use_view = false;  // .grad is kept as `view` (gradient_as_bucket_view)
    bool grad_is_view() const {
      const auto& g = tensor.grad();
      return use_view && g.defined() && g.data_ptr() == view.data_ptr() &&
             g.strides() == view.strides() && g.sizes() == view.sizes() &&
             g.scalar_type() == view.scalar_type();
    }
  };
  struct Bucket {
    std::vector<std::size_t> params;
    ::torch::Tensor flat;  // the parameters' dtype
    ::torch::Tensor wire;  // f16/bf16 copy when compressing
    DType dtype = DType::F32;
    std::size_t pending = 0;  // parameters not yet ready
    bool launched = false;
    Work work;
    std::int64_t t_issue = 0;  // timeline: when its allreduce was issued (ns)
  };

  Communicator comm;
  std::unique_ptr<::torch::optim::Optimizer> opt;
  DistributedOptimizerOptions o;
  std::vector<Param> params;
  std::vector<Bucket> buckets;
  NamedTensors buffers;  // broadcast from rank 0 each step (broadcast_buffers)
  bool checks_buffers = false;  // the constructor checked them (given a module)
  detail::OverlapTrial overlap{false, true, 1};  // set by init()

  // Join: attached, and the number of ranks that train in the current step.
  bool join_attached = false;
  int join_active = 0;

  std::mutex mu;
  std::size_t next_launch = 0;
  int passes = 0;  // backward passes finished since the last step
  bool callback_queued = false;
  bool synchronized = false;
  std::vector<std::string> errors;  // found in hooks, thrown by step()
  std::int64_t t_first = 0;  // timeline: the step's first gradient (ns); 0: not recording

  ~Impl() {
    settle();
    for (auto& p : params)
      if (p.accumulator) p.accumulator->del_post_hook(p.hook_key);
  }

  // Waits for the allreduces in flight, whatever their outcome.
  void settle() {
    for (auto& b : buckets)
      if (b.launched) try {
          b.work.wait();
        } catch (...) {
        }
  }

  std::string err(const std::string& text) const { return prefix(comm.rank()) + text; }

  void init(NamedTensors named);
  void reform(Communicator next);
  void start_trial() {  // one rank communicates nothing: no trial
    overlap = detail::OverlapTrial(o.overlap == Overlap::Auto && comm.size() > 1,
                                   o.overlap != Overlap::Never, o.overlap_trial_steps);
  }
  void on_grad(std::size_t i, bool sparse);
  void fill(std::size_t i);
  void launch_ready();
  void launch(std::size_t i);
  void synchronize(bool shadow = false);
  void reset_step();
  // The divisor of Average: the ranks that contributed gradients.
  double divisor() const {
    return join_attached && join_active > 0 ? join_active : comm.size();
  }
  void zero_grad(bool set_to_none);
};

namespace {

std::string sparse_error(const std::string& name) {
  return fmt::format(
      "parameter '{}' received a sparse gradient; DistributedOptimizer reduces dense "
      "gradients only (e.g. construct the embedding with sparse=false)",
      name);
}

// Runs after AccumulateGrad has updated .grad.
struct GradReadyHook : ::torch::autograd::FunctionPostHook {
  explicit GradReadyHook(std::function<void(bool)> fn) : fn(std::move(fn)) {}
  // For AccumulateGrad, `inputs` is the incoming gradient: a sparse one is
  // reported even when .grad is dense (a bucket view densifies it).
  ::torch::autograd::variable_list operator()(const ::torch::autograd::variable_list& outputs,
                                              const ::torch::autograd::variable_list& inputs) override {
    fn(!inputs.empty() && inputs[0].defined() && inputs[0].is_sparse());
    return outputs;
  }
  std::function<void(bool)> fn;
};

}  // namespace

void DistributedOptimizer::Impl::init(NamedTensors named) {
  const int rank = comm.rank();
  if (!opt) throw Error(err("DistributedOptimizer: the optimizer is null"));
  if (o.backward_passes_per_step < 1)
    throw Error(err(fmt::format("DistributedOptimizer: backward_passes_per_step must be >= 1, not {}",
                                o.backward_passes_per_step)));
  if (!(o.gradient_predivide_factor > 0))
    throw Error(err(fmt::format("DistributedOptimizer: gradient_predivide_factor must be > 0, not {}",
                                o.gradient_predivide_factor)));
  if (o.bucket_cap_bytes == 0 || o.first_bucket_cap_bytes == 0)
    throw Error(err("DistributedOptimizer: bucket caps must be > 0 bytes"));
  if (o.overlap == Overlap::Auto && o.overlap_trial_steps < 1)
    throw Error(err(fmt::format("DistributedOptimizer: overlap_trial_steps must be >= 1, not {}",
                                o.overlap_trial_steps)));
  start_trial();

  // Trainable parameters, each once.
  std::unordered_set<const void*> seen_impl;
  NamedTensors trainable;
  for (auto& [name, t] : named) {
    if (!t.defined() || !t.requires_grad()) continue;
    if (!seen_impl.insert(t.unsafeGetTensorImpl()).second) continue;
    detail::check_cpu(t, "parameter '" + name + "'", rank);
    if (!t.is_floating_point())
      throw Error(err(fmt::format("parameter '{}' has dtype {}; gradients must be floating point",
                                  name, c10::toString(t.scalar_type()))));
    trainable.emplace_back(name, t);
  }
  // Every parameter the optimizer updates must have its gradient reduced,
  // or the replicas drift apart silently.
  for (const auto& group : opt->param_groups())
    for (const auto& p : group.params())
      if (!seen_impl.count(p.unsafeGetTensorImpl()))
        throw Error(err(fmt::format("DistributedOptimizer: the optimizer updates a parameter of "
                                    "shape {} that is not among the module's trainable "
                                    "parameters; its gradient would not be averaged",
                                    detail::describe(p))));
  // Same model on every rank, or the bucket allreduces would not match.
  detail::check_same_tensors(comm, trainable, {}, 0, "DistributedOptimizer");

  // Buckets in reverse parameter order.
  for (auto it = trainable.rbegin(); it != trainable.rend(); ++it) {
    const auto& [name, t] = *it;
    const DType dt = detail::kolo_dtype(t.scalar_type(), "parameter '" + name + "'", rank);
    const std::size_t bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
    bool fresh = buckets.empty() || buckets.back().dtype != dt;
    if (!fresh) {
      auto& b = buckets.back();
      std::size_t used = 0;
      for (auto pi : b.params) used += static_cast<std::size_t>(params[pi].numel) * t.element_size();
      const std::size_t cap = buckets.size() == 1 ? o.first_bucket_cap_bytes : o.bucket_cap_bytes;
      fresh = used + bytes > cap;
    }
    if (fresh) {
      buckets.emplace_back();
      buckets.back().dtype = dt;
    }
    Param p;
    p.name = name;
    p.tensor = t;
    p.bucket = buckets.size() - 1;
    p.numel = t.numel();
    buckets.back().params.push_back(params.size());
    params.push_back(std::move(p));
  }
  for (auto& b : buckets) {
    std::int64_t n = 0;
    for (auto pi : b.params) {
      params[pi].offset = n;
      n += params[pi].numel;
    }
    const auto st = params[b.params.front()].tensor.scalar_type();
    b.flat = ::torch::zeros({n}, ::torch::TensorOptions().dtype(st));
    if (o.compression == Compression::FP16)
      b.wire = ::torch::empty({n}, ::torch::TensorOptions().dtype(::torch::kHalf));
    else if (o.compression == Compression::BF16)
      b.wire = ::torch::empty({n}, ::torch::TensorOptions().dtype(::torch::kBFloat16));
    b.pending = b.params.size();
    for (auto pi : b.params) {
      auto& p = params[pi];
      p.view = b.flat.narrow(0, p.offset, p.numel).view(p.tensor.sizes());
      // A parameter with another layout (e.g. channels-last) would get
      // gradients in that layout, not our contiguous view: it stays on copies.
      p.use_view = o.gradient_as_bucket_view && p.tensor.is_contiguous();
      if (p.use_view) {
        ::torch::NoGradGuard no_grad;
        const auto& g = p.tensor.grad();
        if (g.defined() && !g.is_sparse() && g.sizes() == p.tensor.sizes()) p.view.copy_(g);
        p.tensor.mutable_grad() = p.view;
      }
    }
  }
  // Hooks last: nothing above may throw after them.
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    p.accumulator = ::torch::autograd::impl::grad_accumulator(p.tensor);
    if (!p.accumulator)
      throw Error(err(fmt::format("parameter '{}' is not a leaf tensor; it has no gradient "
                                  "accumulator to hook",
                                  p.name)));
    p.hook_key =
        p.accumulator->add_post_hook(std::make_unique<GradReadyHook>([this, i](bool sparse) { on_grad(i, sparse); }));
  }
}

void DistributedOptimizer::Impl::reform(Communicator next) {
  if (!next.valid()) throw Error(err("DistributedOptimizer::reform needs a communicator from kolo::init()"));
  if (join_attached) throw Error(err("DistributedOptimizer::reform during a Join"));
  std::lock_guard<std::mutex> lock(mu);
  settle();
  reset_step();
  synchronized = false;
  comm = std::move(next);
  start_trial();
  // The same checks, in the same order, as a newcomer's constructor makes
  // (params[] is in reverse registration order), so that survivors and
  // newcomers take part in the same collectives.
  NamedTensors trainable;
  for (auto it = params.rbegin(); it != params.rend(); ++it) trainable.emplace_back(it->name, it->tensor);
  detail::check_same_tensors(comm, trainable, {}, 0, "DistributedOptimizer");
  if (checks_buffers)
    detail::check_same_tensors(comm, {}, buffers, 0, "DistributedOptimizer (broadcast_buffers)");
}

void DistributedOptimizer::Impl::on_grad(std::size_t i, bool sparse) {
  std::lock_guard<std::mutex> lock(mu);
  synchronized = false;  // a new backward after a synchronize() without step()
  if (timeline::on() && !t_first) t_first = timeline::now_ns();
  if (!callback_queued) {
    callback_queued = true;
    ::torch::autograd::Engine::get_default_engine().queue_callback([this] {
      std::lock_guard<std::mutex> l(mu);
      ++passes;
      callback_queued = false;
    });
  }
  auto& p = params[i];
  if (passes >= o.backward_passes_per_step) {
    if (errors.empty())
      errors.push_back(fmt::format(
          "backward ran {} times without step(); backward_passes_per_step is {}", passes + 1,
          o.backward_passes_per_step));
    return;
  }
  p.seen = true;
  if (sparse) errors.push_back(sparse_error(p.name));
  if (passes + 1 < o.backward_passes_per_step || !overlap.overlapping() || p.ready) return;
  fill(i);
  if (--buckets[p.bucket].pending == 0) launch_ready();
}

// Copies parameter i's gradient (or zeros) into its bucket slot. Caller holds mu.
void DistributedOptimizer::Impl::fill(std::size_t i) {
  auto& p = params[i];
  auto& b = buckets[p.bucket];
  ::torch::NoGradGuard no_grad;
  ::torch::Tensor slot = b.flat.narrow(0, p.offset, p.numel);
  p.ready = true;
  const ::torch::Tensor g = p.tensor.grad();
  if (!p.seen || !g.defined()) {
    slot.zero_();
    if (p.use_view) p.tensor.mutable_grad() = p.view;
    return;
  }
  if (p.grad_is_view()) return;  // backward accumulated straight into the bucket
  if (g.is_sparse()) {
    errors.push_back(sparse_error(p.name));
    slot.zero_();
    return;
  }
  if (!g.device().is_cpu()) {
    errors.push_back(fmt::format("parameter '{}' has its gradient on {}, but kolo reduces CPU "
                                 "tensors only",
                                 p.name, g.device().str()));
    slot.zero_();
    return;
  }
  // A bucket of one parameter (every parameter above the bucket cap) adopts
  // backward's fresh gradient tensor as its buffer: no copy at all.
  if (p.use_view && b.params.size() == 1 && g.is_contiguous() && g.sizes() == p.tensor.sizes() &&
      g.scalar_type() == b.flat.scalar_type()) {
    b.flat = g.view({-1});
    p.view = g;
    return;
  }
  // copy_ handles non-contiguous gradients and a dtype differing from the parameter's.
  slot.view(g.sizes()).copy_(g);
  // E.g. the user reset .grad to undefined and AccumulateGrad made a new one.
  if (p.use_view && g.sizes() == p.tensor.sizes()) p.tensor.mutable_grad() = p.view;
}

void DistributedOptimizer::Impl::launch_ready() {
  while (next_launch < buckets.size() && buckets[next_launch].pending == 0)
    launch(next_launch++);
}

void DistributedOptimizer::Impl::launch(std::size_t i) {
  Bucket& b = buckets[i];
  ::torch::NoGradGuard no_grad;
  const auto n = static_cast<std::size_t>(b.flat.numel());
  const double pre = o.gradient_predivide_factor;
  if (pre != 1.0) b.flat.div_(pre);
  if (t_first) {  // the engine's span of this allreduce then carries the bucket's name
    timeline::name_next(fmt::format("bucket {}", i));
    b.t_issue = timeline::now_ns();
  }
  if (b.wire.defined()) {
    b.wire.copy_(b.flat);
    const DType wt = o.compression == Compression::FP16 ? DType::F16 : DType::BF16;
    b.work = comm.allreduce_async(b.wire.data_ptr(), b.wire.data_ptr(), n, wt, Op::Sum);
  } else {
    // Under a Join the divisor is known only per step: sum, divide later.
    const Op op = (o.reduction == Reduction::Average && pre == 1.0 && !join_attached) ? Op::Average : Op::Sum;
    b.work = comm.allreduce_async(b.flat.data_ptr(), b.flat.data_ptr(), n, b.dtype, op);
  }
  b.launched = true;
}

void DistributedOptimizer::Impl::reset_step() {
  for (auto& p : params) p.seen = p.ready = false;
  for (auto& b : buckets) {
    b.pending = b.params.size();
    b.launched = false;
    b.work = Work();
    b.t_issue = 0;
  }
  next_launch = 0;
  passes = 0;
  errors.clear();
  t_first = 0;
}

// shadow: a rank that has finished under a Join takes part in another
// rank's step with zero gradients (nothing of its own was seen).
void DistributedOptimizer::Impl::synchronize(bool shadow) {
  std::unique_lock<std::mutex> lock(mu);
  if (synchronized) return;
  if (shadow) {
    for (auto& b : buckets)
      if (b.launched)
        throw Error(err("Join::finish() after a backward pass without step(): this rank's "
                        "gradients were already being communicated"));
    reset_step();
  }
  const std::int64_t t_sync = t_first ? timeline::now_ns() : 0;
  // Everything backward did not hand over, in bucket order.
  std::vector<std::size_t> missing;
  for (auto& b : buckets) {
    if (b.launched) continue;
    for (auto pi : b.params) {
      auto& p = params[pi];
      if (p.ready) continue;
      if (!p.seen && !o.find_unused_parameters && !shadow) missing.push_back(pi);
      fill(pi);
    }
    b.pending = 0;
  }
  launch_ready();
  std::exception_ptr comm_error;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    auto& b = buckets[i];
    try {
      b.work.wait();
    } catch (...) {
      if (!comm_error) comm_error = std::current_exception();
    }
    if (t_sync && b.t_issue)  // issue to done, as this thread saw it
      timeline::span("torch", fmt::format("bucket {}", i), b.t_issue, timeline::now_ns(),
                     fmt::format("\"bytes\": {}, \"params\": {}",
                                 (b.wire.defined() ? b.wire : b.flat).nbytes(), b.params.size()));
  }
  // Before any error is thrown: the peers take part in these too.
  if (!comm_error && o.broadcast_buffers && comm.size() > 1) {
    try {
      detail::broadcast_all(comm, buffers, 0);
    } catch (...) {
      comm_error = std::current_exception();
    }
  }
  // Before any error of this rank's own is thrown: the trial's decision is
  // a collective the peers take part in.
  if (!comm_error) {
    try {
      overlap.step_done(comm);
    } catch (...) {
      comm_error = std::current_exception();
    }
  }
  std::vector<std::string> errs = std::move(errors);
  const std::int64_t t_backward = t_first;  // reset_step() clears it
  reset_step();
  if (comm_error) std::rethrow_exception(comm_error);
  if (!errs.empty()) throw Error(err(errs.front()));
  if (!missing.empty()) {
    // params[] is in reverse registration order; name them in the module's order.
    std::sort(missing.rbegin(), missing.rend());
    std::string names;
    for (std::size_t i = 0; i < missing.size() && i < 10; ++i)
      names += (i ? ", '" : "'") + params[missing[i]].name + "'";
    if (missing.size() > 10) names += fmt::format(" and {} more", missing.size() - 10);
    throw Error(err(fmt::format(
        "{} {} received no gradient in this step; pass find_unused_parameters=true if that is "
        "intended",
        missing.size() == 1 ? "parameter" : "parameters", names)));
  }

  ::torch::NoGradGuard no_grad;
  const double size = divisor();
  const double pre = o.gradient_predivide_factor;
  for (auto& b : buckets) {
    if (b.wire.defined()) b.flat.copy_(b.wire);
    const bool op_averaged =
        !b.wire.defined() && o.reduction == Reduction::Average && pre == 1.0 && !join_attached;
    if (!op_averaged) {
      // Sum so far of (g / pre): Average wants sum/size, Sum wants the plain sum.
      const double post = o.reduction == Reduction::Average ? size / pre : 1.0 / pre;
      if (post != 1.0) b.flat.div_(post);
    }
    for (auto pi : b.params) {
      auto& p = params[pi];
      if (p.grad_is_view()) continue;  // already holds the result
      ::torch::Tensor slot = p.view;
      ::torch::Tensor& g = p.tensor.mutable_grad();
      if (g.defined() && !g.is_sparse() && g.sizes() == p.tensor.sizes() &&
          g.is_non_overlapping_and_dense()) {
        g.copy_(slot);
      } else {
        g = slot.clone();
      }
    }
  }
  synchronized = true;
  if (t_sync) {
    timeline::span("torch", "backward", t_backward, t_sync, "\"from\": \"the first gradient ready\"");
    timeline::span("torch", "synchronize", t_sync, timeline::now_ns());
  }
}

void DistributedOptimizer::Impl::zero_grad(bool set_to_none) {
  std::lock_guard<std::mutex> lock(mu);
  ::torch::NoGradGuard no_grad;
  if (set_to_none) {
    // Backward then hands over fresh gradient tensors (AccumulateGrad steals
    // them) and the hook copies each into its bucket once: two passes over
    // the gradient bytes, against four for memset + in-place accumulation.
    for (auto& p : params) p.tensor.mutable_grad() = ::torch::Tensor();
    return;
  }
  bool views = false;
  for (auto& p : params) {
    if (!p.use_view) continue;
    views = true;
    if (!p.grad_is_view()) p.tensor.mutable_grad() = p.view;
  }
  if (!views) {
    opt->zero_grad();
    return;
  }
  // One memset per bucket instead of one kernel per parameter.
  for (auto& b : buckets) b.flat.zero_();
  for (auto& p : params) {
    if (p.use_view) continue;
    auto& g = p.tensor.mutable_grad();
    if (g.defined()) {
      g = g.detach();
      g.zero_();
    }
  }
}

// --- public face ----------------------------------------------------------

namespace {
NamedTensors module_parameters(const ::torch::nn::Module& module) {
  NamedTensors v;
  for (const auto& item : module.named_parameters()) v.emplace_back(item.key(), item.value());
  return v;
}
}  // namespace

DistributedOptimizer::DistributedOptimizer(Communicator comm, const ::torch::nn::Module& module,
                                           std::unique_ptr<::torch::optim::Optimizer> optimizer,
                                           DistributedOptimizerOptions options)
    : DistributedOptimizer(std::move(comm), module_parameters(module), std::move(optimizer),
                           options) {
  if (options.broadcast_buffers) {
    for (const auto& item : module.named_buffers()) impl_->buffers.emplace_back(item.key(), item.value());
    // The buffer broadcasts must match on every rank.
    impl_->checks_buffers = true;
    detail::check_same_tensors(impl_->comm, {}, impl_->buffers, 0, "DistributedOptimizer (broadcast_buffers)");
  }
}

DistributedOptimizer::DistributedOptimizer(Communicator comm, NamedTensors named_parameters,
                                           std::unique_ptr<::torch::optim::Optimizer> optimizer,
                                           DistributedOptimizerOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->comm = std::move(comm);
  if (!impl_->comm.valid()) throw Error("kolo: DistributedOptimizer needs a communicator from kolo::init()");
  impl_->opt = std::move(optimizer);
  impl_->o = options;
  impl_->init(std::move(named_parameters));
}

void DistributedOptimizer::reform(Communicator comm) { impl_->reform(std::move(comm)); }

DistributedOptimizer::DistributedOptimizer(DistributedOptimizer&&) noexcept = default;
DistributedOptimizer& DistributedOptimizer::operator=(DistributedOptimizer&&) noexcept = default;
DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::synchronize() { impl_->synchronize(); }

void DistributedOptimizer::step() {
  impl_->synchronize();
  impl_->synchronized = false;
  if (!timeline::on()) {
    impl_->opt->step();
    return;
  }
  const std::int64_t t0 = timeline::now_ns();
  impl_->opt->step();
  timeline::span("torch", "optimizer step", t0, timeline::now_ns());
}

void DistributedOptimizer::skip_step() { impl_->synchronized = false; }

void DistributedOptimizer::zero_grad(bool set_to_none) { impl_->zero_grad(set_to_none); }

::torch::optim::Optimizer& DistributedOptimizer::optimizer() { return *impl_->opt; }
const ::torch::optim::Optimizer& DistributedOptimizer::optimizer() const { return *impl_->opt; }
const DistributedOptimizerOptions& DistributedOptimizer::options() const { return impl_->o; }
Communicator& DistributedOptimizer::communicator() { return impl_->comm; }

bool DistributedOptimizer::overlapping() const { return impl_->overlap.overlapping(); }
bool DistributedOptimizer::choosing_overlap() const { return impl_->overlap.deciding(); }

std::vector<std::vector<std::string>> DistributedOptimizer::bucket_layout() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : impl_->buckets) {
    out.emplace_back();
    for (auto pi : b.params) out.back().push_back(impl_->params[pi].name);
  }
  return out;
}

// --- Join ---------------------------------------------------------------------

Join::Join(DistributedOptimizer& optimizer, GradScaler* scaler) : opt_(&optimizer), scaler_(scaler) {
  auto& im = *opt_->impl_;
  if (im.o.backward_passes_per_step != 1)
    throw Error(im.err(fmt::format("Join: backward_passes_per_step must be 1, not {} (a rank "
                                   "could finish in the middle of a step)",
                                   im.o.backward_passes_per_step)));
  if (im.join_attached) throw Error(im.err("Join: the optimizer already has a Join attached"));
  std::lock_guard<std::mutex> lock(im.mu);
  im.join_attached = true;
  im.join_active = im.comm.size();
}

Join::~Join() {
  std::lock_guard<std::mutex> lock(opt_->impl_->mu);
  opt_->impl_->join_attached = false;
  opt_->impl_->join_active = 0;
}

int Join::begin_step() {
  auto& im = *opt_->impl_;
  if (finished_) throw Error(im.err("Join::begin_step() after finish()"));
  std::int32_t training = 1;
  im.comm.allreduce(&training, 1, Op::Sum);
  std::lock_guard<std::mutex> lock(im.mu);
  im.join_active = training;
  return training;
}

std::int64_t Join::finish() {
  auto& im = *opt_->impl_;
  if (finished_) return 0;
  finished_ = true;
  std::int64_t shadowed = 0;
  for (;;) {
    std::int32_t training = 0;
    im.comm.allreduce(&training, 1, Op::Sum);
    if (training == 0) break;  // every rank is in finish(): all see 0 together
    {
      std::lock_guard<std::mutex> lock(im.mu);
      im.join_active = training;
    }
    // The step the training ranks take: zero gradients into the same
    // allreduces, then the same update with the averaged result (through the
    // scaler: its collective inf check, its skip and its scale update).
    opt_->zero_grad();
    im.synchronize(/*shadow=*/true);
    if (scaler_) {
      scaler_->step(*opt_);
      scaler_->update();
    } else {
      im.synchronized = false;
      im.opt->step();
    }
    ++shadowed;
  }
  im.join_active = im.comm.size();
  return shadowed;
}

}  // namespace kolo::torch
