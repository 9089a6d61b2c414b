// torch_rank_prog's checkpoint modes: a training resumed from a checkpoint
// (resume), a write killed midway (ckpt_kill), and a checkpoint written and
// loaded, which the driver damages in between (ckpt_save, ckpt_load).
#include "prog_common.h"

#include <sys/resource.h>

#include <limits>
#include <memory>
#include <optional>

namespace prog {

// resume: trains with DistributedSampler + LinearScalingWarmup, writes a
// checkpoint at --ckpt-at; with --resume-from it loads one first; rank 0
// writes the final parameters.
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

namespace {

struct Big : torch::nn::Module {
  Big() { w = register_parameter("w", torch::zeros({a_size})); }
  static constexpr std::int64_t a_size = 1 << 22;  // 16 MiB of f32
  torch::Tensor w;
};

}  // namespace

// ckpt_kill: saves checkpoint v1, then limits the file size (RLIMIT_FSIZE)
// and saves v2, which the kernel kills midway with SIGXFSZ.
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

// ckpt_load: loads a checkpoint (collectively) and prints a parameter value.
int mode_ckpt_load(kolo::Communicator& comm, const Args& a) {
  Big m;
  torch::optim::SGD opt(m.parameters(), torch::optim::SGDOptions(0.1));
  auto st = kolo::torch::load_checkpoint(comm, a.get("ckpt"), m, opt);
  std::printf("rank %d loaded epoch %lld step %lld w[0]=%g w[last]=%g\n", comm.rank(),
              static_cast<long long>(st.epoch), static_cast<long long>(st.step), m.w[0].item<double>(),
              m.w[Big::a_size - 1].item<double>());
  return 0;
}

// ckpt_save: writes a small valid checkpoint.
int mode_ckpt_save(kolo::Communicator& comm, const Args& a) {
  Big m;
  torch::optim::SGD opt(m.parameters(), torch::optim::SGDOptions(0.1));
  torch::NoGradGuard g;
  m.w.fill_(3.0f);
  if (comm.rank() == 0) kolo::torch::save_checkpoint(a.get("ckpt"), m, opt, {3, 30, {}, std::nullopt});
  return 0;
}

}  // namespace prog
