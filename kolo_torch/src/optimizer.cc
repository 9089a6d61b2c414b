// DistributedOptimizer: a LibTorch adapter over kolo::Reducer
// (include/kolo/reducer.h), which owns the gradient path of every front —
// buckets in reverse registration order (first_bucket_cap_bytes, then
// bucket_cap_bytes), ordered issue, fusion, compression, predivide,
// accumulation over backward_passes_per_step, Join's vote and shadow steps.
// What lives here: the hooks, the tensor views, the LibTorch checks and
// errors, writing the results into .grad, and what only this front offers
// (gradient_as_bucket_view, find_unused_parameters, broadcast_buffers, the
// overlap trial).
//
// How a step goes
// ---------------
// Each parameter's gradient accumulator (the AccumulateGrad node that writes
// .grad) gets a post-hook. It counts the pass with the reducer; at the last
// pass of a step it hands .grad over: the reducer copies it into its bucket
// (nothing to copy where .grad is the bucket's view, gradient_as_bucket_view)
// or, a bucket of one parameter, reduces it where it lies; complete buckets
// start their allreduce strictly in bucket order.
//
// step() (via synchronize()) hands over what backward did not — parameters
// that got a gradient only in earlier passes, or none at all (zeros with
// find_unused_parameters, else an error after the collectives have been
// completed, so that no peer is left waiting mid-step) — waits for the
// reducer, writes the results into .grad and calls the wrapped optimizer.
// Errors found inside hooks (sparse or non-CPU gradients) are kept and
// thrown from step(), since the autograd engine would wrap or lose them.
//
// Overlap::Never leaves every bucket to step(); Overlap::Auto alternates the
// two ways in the first steps and keeps the faster (overlap_trial.h).
//
// Options that add collectives to a step, always in this order after the
// buckets: broadcast_buffers (one broadcast per buffer, from rank 0); under
// Overlap::Auto, once, the trial's decision (one allreduce of two doubles).
//
// Timeline marks (README "Timeline"): the reducer's "backward", "bucket i"
// and "synchronize" (category "torch"), and "optimizer step" here.
//
// Join (uneven inputs) lives at the end of this file: the reducer's vote
// before each step, and a finished rank's shadow steps — the reducer's zero
// allreduces, the same buffer broadcasts, the same optimizer update.
#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common.h"
#include "kolo/reducer.h"
#include "overlap_trial.h"

namespace kolo::torch {

using detail::prefix;

struct DistributedOptimizer::Impl {
  struct Param {
    std::string name;
    ::torch::Tensor tensor;
    // std::shared_ptr up to torch 2.x's switch to c10::intrusive_ptr: whichever
    // impl::grad_accumulator returns in the LibTorch this is built against.
    decltype(::torch::autograd::impl::grad_accumulator(std::declval<const ::torch::Tensor&>())) accumulator;
    std::uintptr_t hook_key = 0;
    ::torch::Tensor view;   // the parameter's slot of its bucket (the reducer's memory), shaped like it
    bool use_view = false;  // .grad is kept as `view` (gradient_as_bucket_view)
    // A CUDA parameter's stream the reducer works on (current at construction).
    std::optional<c10::Stream> stream;
    bool grad_is_view() const {
      const auto& g = tensor.grad();
      return use_view && g.defined() && g.data_ptr() == view.data_ptr() &&
             g.strides() == view.strides() && g.sizes() == view.sizes() &&
             g.scalar_type() == view.scalar_type();
    }
  };

  Communicator comm;
  std::unique_ptr<::torch::optim::Optimizer> opt;
  DistributedOptimizerOptions o;
  std::vector<Param> params;  // the reducer's entries, in registration order
  std::unique_ptr<Reducer> reducer;
  NamedTensors buffers;  // broadcast from rank 0 each step (broadcast_buffers)
  bool checks_buffers = false;  // the constructor checked them (given a module)
  detail::OverlapTrial overlap{false, true, 1};  // set by init()
  bool join_attached = false;

  std::mutex mu;
  bool synchronized = false;
  std::vector<std::string> errors;     // found in hooks, thrown by step()
  std::vector<::torch::Tensor> held;   // gradients the reducer reads until finish()
  std::vector<c10::Stream> streams;    // the parameters' streams, each once

  // Training may run on other streams than the reducer's (the autograd
  // engine's current one in a hook, a torch::cuda stream guard in step()):
  // the reducer's reads wait for gradients written there (hand_over), its
  // writes of results for what the current streams queued before
  // (before=true), and the current streams for the results (before=false).
  void order_reads(const Param& p) {
    if (p.stream) detail::order(*detail::current_stream(p.tensor), *p.stream);
  }
  void order_results(bool before) {
    for (const auto& s : streams) {
      const auto current = detail::current_stream(s.device());
      before ? detail::order(current, s) : detail::order(s, current);
    }
  }

  ~Impl() {
    for (auto& p : params)
      if (p.accumulator) p.accumulator->del_post_hook(p.hook_key);
    if (!reducer) return;
    reducer->reset();  // waits for the allreduces in flight
    // The views point into the reducer's buffers: a .grad that is one keeps
    // its values in memory of its own.
    for (auto& p : params)
      if (p.grad_is_view()) p.tensor.mutable_grad() = p.view.clone();
  }

  std::string err(const std::string& text) const { return prefix(comm.rank()) + text; }

  // Parameter i's slot as a tensor shaped like it; the view keeps the slot's
  // memory alive after the reducer moved the entry.
  ::torch::Tensor slot_view(std::size_t i) {
    auto memory = reducer->slot_memory(i);
    void* data = memory.get();
    return ::torch::from_blob(data, params[i].tensor.sizes(), [memory = std::move(memory)](void*) {},
                              ::torch::TensorOptions().dtype(params[i].tensor.scalar_type()));
  }
  // The reducer moved its entries (its rebuild after the first step, or
  // reset()): the views follow, and a .grad that was the old view becomes the
  // new one, which already holds its values (DDP re-points .grad the same way
  // after its bucket rebuild). Caller holds mu.
  std::uint64_t seen_moves = 0;
  void follow_moves() {
    if (reducer->moves() == seen_moves) return;
    seen_moves = reducer->moves();
    for (std::size_t i = 0; i < params.size(); ++i) {
      auto& p = params[i];
      if (!p.use_view) continue;
      const bool was = p.grad_is_view();
      p.view = slot_view(i);
      if (was) p.tensor.mutable_grad() = p.view;
    }
  }

  void init(NamedTensors named);
  void reform(Communicator next);
  void start_trial() {  // one rank communicates nothing: no trial
    overlap = detail::OverlapTrial(o.overlap == Overlap::Auto && comm.size() > 1,
                                   o.overlap != Overlap::Never, o.overlap_trial_steps);
  }
  void on_grad(std::size_t i, bool sparse);
  void hand_over(std::size_t i);
  ::torch::Tensor write_result(std::size_t i);
  void copy_back(std::size_t i, const ::torch::Tensor& out);
  void synchronize(bool shadow = false);
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
  if (o.overlap == Overlap::Auto && o.overlap_trial_steps < 1)
    throw Error(err(fmt::format("DistributedOptimizer: overlap_trial_steps must be >= 1, not {}",
                                o.overlap_trial_steps)));
  start_trial();

  // Trainable parameters, each once.
  std::unordered_set<const void*> seen_impl;
  NamedTensors trainable;
  std::vector<Place> places;  // CUDA parameters: reduced on the stream current now, in CUDA buckets
  for (auto& [name, t] : named) {
    if (!t.defined() || !t.requires_grad()) continue;
    if (!seen_impl.insert(t.unsafeGetTensorImpl()).second) continue;
    places.push_back(detail::place_of(t, "parameter '" + name + "'", rank));
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

  std::vector<ReducerEntry> entries;
  for (const auto& [name, t] : trainable) {
    entries.push_back({static_cast<std::size_t>(t.numel()),
                       detail::kolo_dtype(t.scalar_type(), "parameter '" + name + "'", rank),
                       places[entries.size()]});
    Param p;
    p.name = name;
    p.tensor = t;
    p.stream = detail::current_stream(t);
    if (p.stream && std::find(streams.begin(), streams.end(), *p.stream) == streams.end())
      streams.push_back(*p.stream);
    params.push_back(std::move(p));
  }
  ReducerOptions ro;
  ro.bucket_bytes = o.bucket_cap_bytes;
  ro.first_bucket_bytes = o.first_bucket_cap_bytes;
  ro.op = o.reduction == Reduction::Average ? Op::Average : Op::Sum;
  // Sum over ranks of g / factor; Average then multiplies by factor / ranks,
  // Sum by factor (the plain sum).
  ro.prescale = 1.0 / o.gradient_predivide_factor;
  ro.postscale = o.gradient_predivide_factor;
  ro.wire = o.compression == Compression::FP16 ? Wire::F16
            : o.compression == Compression::BF16 ? Wire::BF16 : Wire::Same;
  ro.passes = o.backward_passes_per_step;
  if (o.overlap == Overlap::Auto && comm.size() > 1)  // KOLO_AUTOTUNE times none of the overlap trial's steps
    ro.tune_after_steps = detail::OverlapTrial::kWarmupSteps + 2 * o.overlap_trial_steps;
  ro.timeline_category = "torch";
  ro.what = "DistributedOptimizer";
  reducer = std::make_unique<Reducer>(comm, std::move(entries), std::move(ro));

  ::torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    // A parameter with another layout (e.g. channels-last) would get
    // gradients in that layout, not our contiguous view: it stays on copies.
    // So does a CUDA parameter: the reducer lends slots of host buckets only.
    p.use_view = o.gradient_as_bucket_view && p.tensor.is_contiguous() && p.tensor.device().is_cpu();
    if (!p.use_view) continue;
    p.view = slot_view(i);
    const auto& g = p.tensor.grad();
    if (g.defined() && !g.is_sparse() && g.sizes() == p.tensor.sizes()) p.view.copy_(g);
    p.tensor.mutable_grad() = p.view;
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
  reducer->reset(next);
  follow_moves();
  errors.clear();
  held.clear();
  synchronized = false;
  comm = std::move(next);
  start_trial();
  // The same checks, in the same order, as a newcomer's constructor makes,
  // so that survivors and newcomers take part in the same collectives.
  NamedTensors trainable;
  for (const auto& p : params) trainable.emplace_back(p.name, p.tensor);
  detail::check_same_tensors(comm, trainable, {}, 0, "DistributedOptimizer");
  if (checks_buffers)
    detail::check_same_tensors(comm, {}, buffers, 0, "DistributedOptimizer (broadcast_buffers)");
}

void DistributedOptimizer::Impl::on_grad(std::size_t i, bool sparse) {
  std::lock_guard<std::mutex> lock(mu);
  synchronized = false;  // a new backward after a synchronize() without step()
  const Reducer::Arrival a = reducer->arrived(i);
  if (a == Reducer::Arrival::Extra) {
    if (errors.empty())
      errors.push_back(fmt::format("backward ran {} times without step(); backward_passes_per_step is {}",
                                   o.backward_passes_per_step + 1, o.backward_passes_per_step));
    return;
  }
  if (sparse) errors.push_back(sparse_error(params[i].name));
  if (a == Reducer::Arrival::Final && overlap.overlapping()) hand_over(i);
}

// Parameter i's gradient (or zeros) to the reducer. Caller holds mu.
void DistributedOptimizer::Impl::hand_over(std::size_t i) {
  auto& p = params[i];
  ::torch::NoGradGuard no_grad;
  const ::torch::Tensor g = p.tensor.grad();
  auto zeros = [&] {
    reducer->ready(i, nullptr);
    if (p.use_view) p.tensor.mutable_grad() = p.view;
  };
  if (reducer->arrivals(i) == 0 || !g.defined()) return zeros();
  if (p.grad_is_view()) {  // backward accumulated straight into the bucket
    reducer->ready(i, p.view.data_ptr());
    return;
  }
  if (g.is_sparse()) {
    errors.push_back(sparse_error(p.name));
    return zeros();
  }
  if (g.device() != p.tensor.device()) {
    errors.push_back(fmt::format("parameter '{}' is on {} but its gradient is on {}; kolo reduces a "
                                 "gradient where its parameter is",
                                 p.name, p.tensor.device().str(), g.device().str()));
    return zeros();
  }
  if (g.is_contiguous() && g.sizes() == p.tensor.sizes() && g.scalar_type() == p.tensor.scalar_type()) {
    // A bucket of this parameter alone (every parameter above the bucket
    // cap) reduces backward's gradient tensor where it lies: no copy at all.
    held.push_back(g);
    order_reads(p);
    if (!reducer->ready(i, g.data_ptr(), /*in_place=*/true) && p.use_view)
      p.tensor.mutable_grad() = p.view;  // e.g. the user reset .grad and AccumulateGrad made a new one
    return;
  }
  // copy_ handles non-contiguous gradients and a dtype differing from the parameter's.
  ::torch::Tensor flat = p.use_view ? p.view : ::torch::empty_like(p.tensor, ::torch::MemoryFormat::Contiguous);
  flat.view(g.sizes()).copy_(g);
  if (!p.use_view) held.push_back(flat);
  order_reads(p);
  reducer->ready(i, flat.data_ptr());
  if (p.use_view && g.sizes() == p.tensor.sizes()) p.tensor.mutable_grad() = p.view;
}

// The reduced gradient of parameter i, queued on the reducer's stream: into
// .grad where it can take it (nothing moves where it was reduced in place or
// is the view), else into the tensor returned, which copy_back() puts into
// .grad once the current stream waits for the reducer's. Caller holds mu.
::torch::Tensor DistributedOptimizer::Impl::write_result(std::size_t i) {
  auto& p = params[i];
  const ::torch::Tensor& g = p.tensor.grad();
  if (g.defined() && !g.is_sparse() && g.is_contiguous() && g.sizes() == p.tensor.sizes() &&
      g.scalar_type() == p.tensor.scalar_type()) {
    reducer->result(i, g.data_ptr());
    return {};
  }
  ::torch::Tensor out = p.use_view ? p.view : ::torch::empty_like(p.tensor, ::torch::MemoryFormat::Contiguous);
  reducer->result(i, out.data_ptr());
  return out;
}

// write_result's tensor into parameter i's .grad: copied where .grad is a
// dense tensor of the parameter's shape (another dtype, other strides), else
// .grad becomes it. Caller holds mu.
void DistributedOptimizer::Impl::copy_back(std::size_t i, const ::torch::Tensor& out) {
  ::torch::Tensor& g = params[i].tensor.mutable_grad();
  if (g.defined() && !g.is_sparse() && g.sizes() == params[i].tensor.sizes() && g.is_non_overlapping_and_dense())
    g.copy_(out);
  else
    g = out;
}

// shadow: a rank that has finished under a Join takes part in another
// rank's step with zero gradients (nothing of its own was seen).
void DistributedOptimizer::Impl::synchronize(bool shadow) {
  std::unique_lock<std::mutex> lock(mu);
  if (synchronized) return;
  if (shadow && reducer->started())
    throw Error(err("Join::finish() after a backward pass without step(): this rank's "
                    "gradients were already being communicated"));
  reducer->begin_finish();
  // Everything backward did not hand over.
  std::vector<std::size_t> missing;
  if (!shadow)
    for (auto i : reducer->unready()) {
      if (reducer->arrivals(i) == 0 && !o.find_unused_parameters) missing.push_back(i);
      hand_over(i);
    }
  std::exception_ptr comm_error;
  try {
    if (shadow) {
      errors.clear();
      reducer->shadow();
    } else {
      reducer->finish();
    }
  } catch (...) {
    comm_error = std::current_exception();
  }
  follow_moves();  // the first step's end rebuilt the layout
  held.clear();
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
  errors.clear();
  if (comm_error) std::rethrow_exception(comm_error);
  if (!errs.empty()) throw Error(err(errs.front()));
  if (!missing.empty()) {
    std::string names;
    for (std::size_t k = 0; k < missing.size() && k < 10; ++k)
      names += (k ? ", '" : "'") + params[missing[k]].name + "'";
    if (missing.size() > 10) names += fmt::format(" and {} more", missing.size() - 10);
    throw Error(err(fmt::format(
        "{} {} received no gradient in this step; pass find_unused_parameters=true if that is "
        "intended",
        missing.size() == 1 ? "parameter" : "parameters", names)));
  }
  ::torch::NoGradGuard no_grad;
  order_results(true);
  std::vector<std::pair<std::size_t, ::torch::Tensor>> pending;  // results .grad takes by a copy
  for (std::size_t i = 0; i < params.size(); ++i)
    if (::torch::Tensor out = write_result(i); out.defined()) pending.emplace_back(i, std::move(out));
  order_results(false);  // before the copies: they read what the reducer's stream wrote
  for (const auto& [i, out] : pending) copy_back(i, out);
  synchronized = true;
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
  for (auto& p : params) {
    auto& g = p.tensor.mutable_grad();
    if (!g.defined()) continue;
    if (!p.use_view) g = g.detach();
    g.zero_();
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
  const Reducer& r = *impl_->reducer;
  for (std::size_t b = 0; b < r.buckets(); ++b) {
    out.emplace_back();
    for (auto i : r.bucket(b)) out.back().push_back(impl_->params[i].name);
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
  im.join_attached = true;
}

Join::~Join() {
  opt_->impl_->join_attached = false;
  opt_->impl_->reducer->forget_vote();  // ordinary averaging again
}

int Join::begin_step() {
  auto& im = *opt_->impl_;
  if (finished_) throw Error(im.err("Join::begin_step() after finish()"));
  return im.reducer->vote(true);  // the coming step's divisor
}

std::int64_t Join::finish() {
  auto& im = *opt_->impl_;
  if (finished_) return 0;
  finished_ = true;
  std::int64_t shadowed = 0;
  // Every rank in finish() votes 0: all see 0 together and return.
  while (im.reducer->vote(false) > 0) {
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
  im.reducer->forget_vote();
  return shadowed;
}

}  // namespace kolo::torch
