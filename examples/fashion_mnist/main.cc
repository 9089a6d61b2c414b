// fashion_mnist — kolo's main job: data-parallel training of a CNN (or a big
// MLP) on Fashion-MNIST with LibTorch and kolo.
//
//   kolorun -np 2 build/examples/fashion_mnist/fashion_mnist            # 1 epoch, ~70 s on 2 cores, ~88 %
//   kolorun -np 2 build/examples/fashion_mnist/fashion_mnist --epochs 3 --resume   # 2 more epochs
//   kolorun -np 2 build/examples/fashion_mnist/fashion_mnist --model mlp --bench-steps 60 --batch 32
//   kolorun -np 2 build/examples/fashion_mnist/fashion_mnist --model convbn --amp bf16   # SyncBatchNorm, autocast
//   kolorun -np 2 build/examples/fashion_mnist/fashion_mnist_preprocess --out train.kcache   # augment once
//   kolorun -np 2 build/examples/fashion_mnist/fashion_mnist --cache train.kcache             # train from it
//   kolorun -np 2 build/examples/fashion_mnist/fashion_mnist --device cuda   # on the GPUs (LibTorch >= 2.2 with CUDA)
//
// Every rank holds the whole data set in memory and trains on its shard
// (DistributedSampler); gradients are averaged by DistributedOptimizer; the
// learning rate is the single-worker lr scaled by the number of ranks after a
// linear warm-up; rank 0 draws the progress bar and writes a checkpoint after
// every epoch; test accuracy is computed on all ranks (each on a slice of the
// test set) and summed.
#include <ATen/autocast_mode.h>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)
#include <kolo/data/torch_dataset.h>
#include <kolo/torch.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <cstdio>
#include <memory>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "idx.h"
#include "progress.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// --- models -----------------------------------------------------------------

struct Net : torch::nn::Module {
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // --amp fp16: LibTorch 1.13 has no f16 convolution, matrix product or
  // batch norm on the CPU (and CPU autocast is bf16 only), so f16 is
  // emulated: every activation is rounded to f16 between layers, and
  // backward's cast rounds its gradient to f16 too — f16's range and
  // precision, computed in f32. That is what loss scaling exists for.
  bool fp16 = false;
  torch::Tensor q(const torch::Tensor& x) const { return fp16 ? x.to(torch::kHalf).to(torch::kFloat32) : x; }
};

// conv32-conv64-fc128, 1.2 M parameters: the PyTorch DDP anchor's model.
struct Cnn : Net {
  Cnn() {
    c1 = register_module("c1", torch::nn::Conv2d(1, 32, 3));
    c2 = register_module("c2", torch::nn::Conv2d(32, 64, 3));
    f1 = register_module("f1", torch::nn::Linear(9216, 128));
    f2 = register_module("f2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::max_pool2d(q(torch::relu(c2(q(torch::relu(c1(q(x))))))), 2);
    return f2(q(torch::relu(f1(torch::flatten(x, 1)))));
  }
  torch::nn::Conv2d c1{nullptr}, c2{nullptr};
  torch::nn::Linear f1{nullptr}, f2{nullptr};
};

// 784-4096-4096-10, 20.3 M parameters: communication-heavy.
struct Mlp : Net {
  Mlp() {
    f1 = register_module("f1", torch::nn::Linear(784, 4096));
    f2 = register_module("f2", torch::nn::Linear(4096, 4096));
    f3 = register_module("f3", torch::nn::Linear(4096, 10));
  }
  torch::Tensor forward(torch::Tensor x) override {
    return f3(q(torch::relu(f2(q(torch::relu(f1(q(torch::flatten(x, 1)))))))));
  }
  torch::nn::Linear f1{nullptr}, f2{nullptr}, f3{nullptr};
};

// The classic tutorial ConvNet: conv5x5-16, BatchNorm, ReLU, maxpool;
// conv5x5-32, BatchNorm, ReLU, maxpool; fc to 10 (0.03 M parameters). A
// Sequential, so that convert_sync_batchnorm can swap in SyncBatchNorm.
struct ConvBn : Net {
  ConvBn() {
    namespace nn = torch::nn;
    seq = register_module(
        "net", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2)), nn::BatchNorm2d(16),
                              nn::Functional(torch::relu), nn::MaxPool2d(2),
                              nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2)), nn::BatchNorm2d(32),
                              nn::Functional(torch::relu), nn::MaxPool2d(2), nn::Flatten(),
                              nn::Linear(7 * 7 * 32, 10)));
  }
  void use_sync_batchnorm(kolo::Communicator comm) {
    seq = torch::nn::Sequential(replace_module("net", kolo::torch::convert_sync_batchnorm(comm, seq)));
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = q(x);
    for (auto& layer : *seq) x = q(layer.forward(x));
    return x;
  }
  torch::nn::Sequential seq{nullptr};
};

// --amp bf16: autocast on the training device (what torch.autocast(device)
// sets): convolutions and matrix products run in bf16 inside the scope.
// LibTorch 2.4 names the device in one call; 1.13 to 2.3 had a call per device.
class Autocast {
 public:
  Autocast(bool on, bool cuda) : on_(on), cuda_(cuda) {
    if (!on_) return;
    prev_enabled_ = enabled();
    prev_dtype_ = dtype();
    set(true, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    set(prev_enabled_, prev_dtype_);
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::DeviceType device() const { return cuda_ ? at::kCUDA : at::kCPU; }
  bool enabled() const { return at::autocast::is_autocast_enabled(device()); }
  at::ScalarType dtype() const { return at::autocast::get_autocast_dtype(device()); }
  void set(bool on, at::ScalarType t) const {
    at::autocast::set_autocast_enabled(device(), on);
    at::autocast::set_autocast_dtype(device(), t);
  }
#else
  bool enabled() const { return cuda_ ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled(); }
  at::ScalarType dtype() const {
    return cuda_ ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
  }
  void set(bool on, at::ScalarType t) const {
    if (cuda_) {
      at::autocast::set_enabled(on);
      at::autocast::set_autocast_gpu_dtype(t);
    } else {
      at::autocast::set_cpu_enabled(on);
      at::autocast::set_autocast_cpu_dtype(t);
    }
  }
#endif
  bool on_, cuda_;
  bool prev_enabled_ = false;
  at::ScalarType prev_dtype_ = at::kBFloat16;
};

// --- data ---------------------------------------------------------------------

struct Tensors {
  torch::Tensor x, y;
};

Tensors to_tensors(const fmnist::Split& s, std::size_t limit) {
  const auto n = static_cast<std::int64_t>(std::min(s.images.count, limit));
  const auto h = static_cast<std::int64_t>(s.images.rows), w = static_cast<std::int64_t>(s.images.cols);
  auto x = torch::from_blob(const_cast<std::uint8_t*>(s.images.pixels.data()), {n, 1, h, w}, torch::kUInt8)
               .to(torch::kFloat32)
               .div_(255.0)
               .sub_(0.2860)   // Fashion-MNIST mean and std
               .div_(0.3530);
  auto y = torch::from_blob(const_cast<std::uint8_t*>(s.labels.data()), {n}, torch::kUInt8).to(torch::kInt64);
  return {x, y};
}

// --cache: the training samples of a kolo::data cache built by
// fashion_mnist_preprocess (augmented, normalised f32 [1, rows, cols]). x and
// y are views of the memory-mapped file: nothing is decoded or copied until
// a batch is gathered.
Tensors from_cache(const std::string& path, std::size_t limit, const fmnist::Images& like) {
  auto ds = kolo::data::CacheDataset::open(path);
  const auto& spec = ds.cache().spec();
  const std::vector<std::int64_t> want{1, static_cast<std::int64_t>(like.rows), static_cast<std::int64_t>(like.cols)};
  if (spec.dtype != kolo::DType::F32 || spec.shape != want)
    throw std::runtime_error(fmt::format("{}: its records are [{}] {} (transform '{}'), not [1, {}, {}] f32 "
                                         "images; build it with fashion_mnist_preprocess",
                                         path, fmt::join(spec.shape, ", "), kolo::dtype_name(spec.dtype),
                                         spec.transform, like.rows, like.cols));
  auto x = ds.data();
  auto y = ds.targets();
  const std::int64_t n = limit ? std::min<std::int64_t>(x.size(0), static_cast<std::int64_t>(limit)) : x.size(0);
  return {x.slice(0, 0, n), y.slice(0, 0, n)};
}

// The same tensors on `device` (themselves where they are there already).
Tensors moved(const Tensors& t, torch::Device device) { return {t.x.to(device), t.y.to(device)}; }

// --- options --------------------------------------------------------------------

struct Options {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string model = "cnn";
  // Defaults: 1 epoch, ~70 s with 2 ranks on 2 idle cores, ~88 % test accuracy
  // (the default run must end within 3 minutes even on a busy machine).
  int epochs = 1;
  int batch = 64;
  double lr = 0.02;
  double momentum = 0.9;
  int warmup = 100;
  int threads = 1;
  std::uint64_t seed = 42;
  std::string checkpoint = "fashion_mnist.ckpt";
  bool resume = false;
  int checkpoint_every = 0;
  long stop_after = 0;
  std::size_t train_limit = 0;
  std::string compression = "none";
  int accumulate = 1;
  std::string overlap = "auto";  // auto | on | off
  double bucket_mb = 25, first_bucket_mb = 1;
  int bench_steps = 0;
  bool no_progress = false;
  bool zero_memset = false;
  std::string amp = "none";        // none, bf16 (autocast), fp16 (emulated, loss scaling)
  std::string batchnorm = "sync";  // convbn: sync, local, broadcast (rank 0's buffers)
  std::string cache;               // train from this kolo::data cache instead of the IDX images
  std::string device = "cpu";      // cpu, or cuda: this rank's GPU (local rank modulo the GPUs)
};

// --device: the CPU, or the GPU of this rank's local index (ranks share the
// GPUs round-robin, as Horovod's torch.cuda.set_device(hvd.local_rank()) does
// with one GPU per rank).
torch::Device device_of(const Options& o, const kolo::Communicator& comm) {
  if (o.device == "cpu") return torch::kCPU;
  const auto gpus = torch::cuda::device_count();
  if (gpus == 0)
    throw std::runtime_error(fmt::format("rank {}: --device cuda, but LibTorch sees no GPU ({})", comm.rank(),
                                         torch::cuda::is_available() ? "no device"
                                                                     : "this LibTorch has no CUDA or no driver"));
  return {torch::kCUDA, static_cast<c10::DeviceIndex>(comm.local_rank() % static_cast<int>(gpus))};
}

// The forward pass and the loss in f32, under autocast with --amp bf16.
torch::Tensor loss_of(Net& model, const torch::Tensor& x, const torch::Tensor& y, const Options& o) {
  torch::Tensor logits;
  {
    Autocast autocast(o.amp == "bf16", x.is_cuda());
    logits = model.forward(x);
  }
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), y);
}

// Test accuracy: rank r evaluates test samples r, r+size, ...; the counts are summed.
double evaluate(kolo::Communicator& comm, Net& model, const Tensors& test) {
  torch::NoGradGuard no_grad;
  model.eval();
  const std::int64_t n = test.x.size(0);
  auto idx = torch::arange(comm.rank(), n, comm.size(), torch::TensorOptions(torch::kInt64).device(test.x.device()));
  double correct = 0;
  for (std::int64_t s = 0; s < idx.size(0); s += 1000) {
    auto b = idx.slice(0, s, std::min<std::int64_t>(s + 1000, idx.size(0)));
    auto pred = model.forward(test.x.index_select(0, b)).argmax(1);
    correct += pred.eq(test.y.index_select(0, b)).sum().item<double>();
  }
  model.train();
  const double total_correct = kolo::torch::allreduce_scalar(comm, correct);
  return total_correct / static_cast<double>(n);
}

// "on", "off", or under auto the mode kept: "auto:on" ("auto:trying" while
// the first steps still try both).
std::string overlap_text(const Options& o, const kolo::torch::DistributedOptimizer& opt) {
  if (o.overlap != "auto") return o.overlap;
  return opt.choosing_overlap() ? "auto:trying" : opt.overlapping() ? "auto:on" : "auto:off";
}

// Throughput as the PyTorch DDP anchor measures it: 5 warm-up steps, then
// `steps` timed steps of contiguous slices of this rank's strided indices.
void bench(kolo::Communicator& comm, Net& model, kolo::torch::DistributedOptimizer& opt,
           kolo::torch::GradScaler& scaler, const Tensors& train, const Options& o) {
  const std::int64_t B = o.batch;
  auto idx = torch::arange(comm.rank(), train.x.size(0), comm.size(),
                           torch::TensorOptions(torch::kInt64).device(train.x.device()));
  Clock::time_point t0;
  torch::Tensor loss;
  // Where a step's time goes: forward + backward (with the overlapped
  // allreduces), waiting for the rest of the communication, the update.
  double t_compute = 0, t_sync = 0, t_update = 0;
  for (int s = 0; s < o.bench_steps + 5; ++s) {
    if (s == 5) {
      comm.barrier();
      t0 = Clock::now();
      t_compute = t_sync = t_update = 0;
    }
    const std::int64_t start = (s * B) % (idx.size(0) - B);
    auto b = idx.slice(0, start, start + B);
    const auto ta = Clock::now();
    opt.zero_grad(!o.zero_memset);
    loss = loss_of(model, train.x.index_select(0, b), train.y.index_select(0, b), o);
    scaler.scale(loss).backward();
    const auto tb = Clock::now();
    scaler.unscale(opt);
    const auto tc = Clock::now();
    scaler.step(opt);
    scaler.update();
    t_compute += std::chrono::duration<double>(tb - ta).count();
    t_sync += std::chrono::duration<double>(tc - tb).count();
    t_update += seconds_since(tc);
  }
  const double dt = seconds_since(t0);
  if (comm.rank() == 0)
    std::printf("kolo model=%s n=%d batch=%d threads=%d overlap=%s compression=%s amp=%s bn=%s "
                "samples_per_s=%.0f step_ms=%.2f loss=%.3f fwd_bwd_ms=%.2f sync_ms=%.2f update_ms=%.2f\n",
                o.model.c_str(), comm.size(), o.batch, torch::get_num_threads(),
                overlap_text(o, opt).c_str(), o.compression.c_str(), o.amp.c_str(),
                o.model == "convbn" ? o.batchnorm.c_str() : "-",
                o.bench_steps * B * comm.size() / dt, dt / o.bench_steps * 1e3, loss.item<double>(),
                t_compute / o.bench_steps * 1e3, t_sync / o.bench_steps * 1e3,
                t_update / o.bench_steps * 1e3);
}

int run(const Options& o) {
#if defined(__GLIBC__)
  // The convolutions' im2col buffers (tens of MB) are above glibc's mmap
  // threshold: without this each step maps, faults in and unmaps them again
  // (~10% of a CNN step in system time).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
  torch::set_num_threads(o.threads);
  const auto t_start = Clock::now();
  auto comm = kolo::init();
  const bool rank0 = comm.rank() == 0;

  const torch::Device device = device_of(o, comm);
  const fmnist::Dataset ds = fmnist::load(o.data);
  // On a GPU the whole data set moves there once (60,000 images: 188 MB).
  const Tensors train = moved(o.cache.empty()
                                  ? to_tensors(ds.train, o.train_limit ? o.train_limit : ds.train.images.count)
                                  : from_cache(o.cache, o.train_limit, ds.train.images),
                              device);
  const Tensors test = moved(to_tensors(ds.test, ds.test.images.count), device);
  const auto n_train = static_cast<std::size_t>(train.x.size(0));

  torch::manual_seed(static_cast<std::uint64_t>(o.seed));
  std::shared_ptr<Net> model;
  if (o.model == "cnn") {
    model = std::make_shared<Cnn>();
  } else if (o.model == "convbn") {
    auto convbn = std::make_shared<ConvBn>();
    if (o.batchnorm == "sync") convbn->use_sync_batchnorm(comm);
    model = convbn;
  } else {
    model = std::make_shared<Mlp>();
  }
  model->fp16 = o.amp == "fp16";
  model->to(device);
  kolo::torch::broadcast_parameters(comm, *model, 0);

  kolo::torch::DistributedOptimizerOptions dopt;
  dopt.backward_passes_per_step = o.accumulate;
  dopt.compression = o.compression == "fp16"   ? kolo::torch::Compression::FP16
                     : o.compression == "bf16" ? kolo::torch::Compression::BF16
                                               : kolo::torch::Compression::None;
  dopt.overlap = o.overlap == "on"    ? kolo::torch::Overlap::Always
                 : o.overlap == "off" ? kolo::torch::Overlap::Never
                                      : kolo::torch::Overlap::Auto;
  dopt.bucket_cap_bytes = static_cast<std::size_t>(o.bucket_mb * (1 << 20));
  dopt.first_bucket_cap_bytes = static_cast<std::size_t>(o.first_bucket_mb * (1 << 20));
  dopt.broadcast_buffers = o.model == "convbn" && o.batchnorm == "broadcast";
  kolo::torch::DistributedOptimizer opt(
      comm, *model,
      std::make_unique<torch::optim::SGD>(model->parameters(),
                                          torch::optim::SGDOptions(o.lr).momentum(o.momentum)),
      dopt);

  // Loss scaling for --amp fp16 only: bf16 has f32's range.
  kolo::torch::GradScaler scaler({.enabled = o.amp == "fp16"});
  long skipped = 0;

  if (o.bench_steps > 0) {
    bench(comm, *model, opt, scaler, train, o);
    return 0;
  }

  kolo::torch::LinearScalingWarmup lr_sched(opt.optimizer(), comm.size(), o.warmup);
  kolo::torch::DistributedSampler sampler(comm, n_train, {.shuffle = true, .seed = o.seed});

  int start_epoch = 0;
  std::int64_t step = 0;
  if (o.resume && kolo::torch::file_exists(o.checkpoint)) {
    const auto st = kolo::torch::load_checkpoint(comm, o.checkpoint, *model, opt);
    start_epoch = static_cast<int>(st.epoch);
    step = st.step;
    sampler.set_state(st.sampler);
    lr_sched.set_step(step);
    if (st.scaler) scaler.set_state(*st.scaler);
    if (rank0)
      std::printf("resumed from %s: epoch %d, step %lld, %llu samples into the epoch\n",
                  o.checkpoint.c_str(), start_epoch + 1, static_cast<long long>(step),
                  static_cast<unsigned long long>(st.sampler.position));
  } else if (o.resume && rank0) {
    std::printf("no checkpoint at %s: starting from scratch\n", o.checkpoint.c_str());
  }
  if (rank0)
    std::printf("fashion_mnist: %s%s, %d ranks (%s) on %s, %zu training samples, batch %d per rank, "
                "lr %.3g x %d after %d warm-up steps, %d epochs%s\n",
                o.model.c_str(),
                o.model == "convbn" ? (o.batchnorm == "sync" ? " (SyncBatchNorm)"
                                       : o.batchnorm == "local" ? " (BatchNorm)"
                                                                : " (BatchNorm, broadcast buffers)")
                                    : "",
                comm.size(), comm.transport().c_str(), device.str().c_str(), n_train, o.batch, o.lr, comm.size(), o.warmup,
                o.epochs,
                o.amp == "bf16"   ? ", bf16 autocast"
                : o.amp == "fp16" ? ", f16 (emulated) with loss scaling"
                                  : "");
  std::fflush(stdout);

  auto save = [&](std::int64_t epoch, kolo::torch::SamplerState ss) {
    if (rank0 && !o.checkpoint.empty()) {
      kolo::torch::TrainState st{.epoch = epoch, .step = step, .sampler = ss, .scaler = std::nullopt};
      if (o.amp == "fp16") st.scaler = scaler.state();
      kolo::torch::save_checkpoint(o.checkpoint, *model, opt, st);
    }
  };

  fmnist::ProgressBar bar(rank0 && !o.no_progress);
  const long steps_per_epoch = static_cast<long>((sampler.num_samples() + o.batch - 1) / o.batch);
  double acc = 0;
  for (int epoch = start_epoch; epoch < o.epochs; ++epoch) {
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    bar.start(epoch + 1, o.epochs, steps_per_epoch);
    const auto t0 = Clock::now();
    long done = static_cast<long>(sampler.position() / static_cast<std::size_t>(o.batch));
    const long first = done;
    double loss_sum = 0, loss_avg = 0;
    long micro = 0;
    opt.zero_grad(!o.zero_memset);
    while (auto batch = sampler.next(static_cast<std::size_t>(o.batch))) {
      auto idx = kolo::torch::as_tensor(*batch).to(device);
      auto loss = loss_of(*model, train.x.index_select(0, idx), train.y.index_select(0, idx), o);
      scaler.scale(o.accumulate > 1 ? loss / o.accumulate : loss).backward();
      const double l = loss.item<double>();
      loss_sum += l;
      loss_avg = micro == 0 ? l : 0.98 * loss_avg + 0.02 * l;
      ++micro;
      ++done;
      if (micro % o.accumulate == 0 || sampler.position() == sampler.num_samples()) {
        if (!scaler.step(opt)) ++skipped;
        scaler.update();
        opt.zero_grad(!o.zero_memset);
        lr_sched.step();
        ++step;
        if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && micro % o.accumulate == 0)
          save(epoch, sampler.state());
        if (o.stop_after > 0 && step >= o.stop_after) {
          if (rank0) std::printf("\nstopping after %ld steps (--stop-after)\n", o.stop_after);
          return 0;
        }
      }
      const double sps = static_cast<double>((done - first) * o.batch * comm.size()) / seconds_since(t0);
      bar.update(done, loss_avg, sps);
    }
    const double secs = seconds_since(t0);
    const double mean_loss =
        kolo::torch::allreduce_scalar(comm, micro ? loss_sum / micro : 0.0, kolo::Op::Average);
    acc = evaluate(comm, *model, test);
    save(epoch + 1, {static_cast<std::uint64_t>(epoch + 1), 0});
    if (rank0)
      bar.finish(fmt::format("epoch {}/{}  loss {:.3f}  test accuracy {:.2f}%  {} samples/s  {:.1f} s{}",
                           epoch + 1, o.epochs, mean_loss, acc * 100,
                           fmnist::thousands((done - first) * o.batch * comm.size() / secs), secs,
                           o.amp == "fp16" ? fmt::format("  loss scale {:g}, {} steps skipped",
                                                         scaler.get_scale(), skipped)
                                           : ""));
  }
  if (rank0) {
    if (start_epoch >= o.epochs)
      std::printf("nothing to do: the checkpoint is at epoch %d of %d\n", start_epoch, o.epochs);
    else
      std::printf("done: test accuracy %.2f%% after %d epochs, %.1f s in all\n", acc * 100,
                  o.epochs, seconds_since(t_start));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Data-parallel Fashion-MNIST training with LibTorch and kolo (run under kolorun)"};
  app.add_option("--data", o.data, "directory with the gzipped IDX files")->capture_default_str();
  app.add_option("--model", o.model,
                 "cnn (1.2 M parameters), mlp (20.3 M) or convbn (conv-BN-conv-BN-fc, 0.03 M)")
      ->check(CLI::IsMember({"cnn", "mlp", "convbn"}))
      ->capture_default_str();
  app.add_option("--epochs", o.epochs, "epochs to train")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch", o.batch, "batch size per rank")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--lr", o.lr, "single-worker learning rate (scaled by the number of ranks)")
      ->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--warmup", o.warmup, "steps of linear lr warm-up")->capture_default_str();
  app.add_option("--threads", o.threads, "LibTorch threads per rank")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", o.seed, "initialisation and shuffling seed")->capture_default_str();
  app.add_option("--checkpoint", o.checkpoint, "checkpoint file written after every epoch (\"\": none)")
      ->capture_default_str();
  app.add_flag("--resume", o.resume, "continue from --checkpoint if it exists");
  app.add_option("--checkpoint-every", o.checkpoint_every, "also checkpoint every N steps (0: epoch ends only)");
  app.add_option("--stop-after", o.stop_after, "stop after N optimizer steps (to try --resume)");
  app.add_option("--train-limit", o.train_limit, "use only the first N training samples");
  app.add_option("--compression", o.compression, "gradients on the wire: none, fp16, bf16")
      ->check(CLI::IsMember({"none", "fp16", "bf16"}))
      ->capture_default_str();
  app.add_option("--accumulate", o.accumulate, "backward passes per optimizer step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--overlap", o.overlap,
                 "allreduce during backward (on), in step() (off), or whichever the first steps "
                 "measure faster (auto)")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_flag_callback("--no-overlap", [&o] { o.overlap = "off"; }, "the same as --overlap off");
  app.add_option("--bucket-mb", o.bucket_mb, "gradient bucket cap (MiB)")->capture_default_str();
  app.add_option("--first-bucket-mb", o.first_bucket_mb, "first bucket cap (MiB)")->capture_default_str();
  app.add_option("--bench-steps", o.bench_steps, "measure samples/s over N steps instead of training");
  app.add_flag("--no-progress", o.no_progress, "no progress bar");
  app.add_option("--device", o.device, "cpu, or cuda: this rank's GPU (its local rank modulo the GPUs)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--amp", o.amp,
                 "mixed precision: none, bf16 (autocast), fp16 (f16 rounding emulated in f32, "
                 "dynamic loss scaling)")
      ->check(CLI::IsMember({"none", "bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--batchnorm", o.batchnorm,
                 "convbn's BatchNorm: sync (SyncBatchNorm), local (per rank), broadcast (per rank, "
                 "rank 0's buffers every step)")
      ->check(CLI::IsMember({"sync", "local", "broadcast"}))
      ->capture_default_str();
  app.add_option("--cache", o.cache,
                 "train from this cache (built by fashion_mnist_preprocess) instead of the IDX training images");
  app.add_flag("--zero-memset", o.zero_memset,
               "zero_grad() zeroes the gradient buckets instead of resetting .grad");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\nfashion_mnist: %s\n", e.what());
    return 1;
  }
}
