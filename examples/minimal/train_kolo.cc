// minimal: one LibTorch trainer twice. train_single.cc runs in one process; train_kolo.cc is
// the same program made data-parallel with kolo (diff the two files). kolorun -np 2 minimal_kolo
#include <torch/torch.h>
#include <kolo/torch.h>

#include <cstdio>

int main() {
  auto comm = kolo::init();
  torch::manual_seed(0);
  // A synthetic regression problem: y = x·w + 0.5 + noise (the same data on every run).
  auto x = torch::randn({8192, 32});
  auto y = x.matmul(torch::linspace(-1, 1, 32)).unsqueeze(1) + 0.5 + 0.01 * torch::randn({8192, 1});

  torch::nn::Sequential model(torch::nn::Linear(32, 64), torch::nn::ReLU(), torch::nn::Linear(64, 1));
  kolo::torch::broadcast_parameters(comm, *model);
  kolo::torch::DistributedOptimizer opt(comm, *model, std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.01 * comm.size()).momentum(0.9)));
  kolo::torch::DistributedSampler sampler(comm, x.size(0), {.shuffle = true, .seed = 0});

  const std::int64_t batch = 32;
  for (int epoch = 0; epoch < 5; ++epoch) {
    sampler.set_epoch(epoch); auto perm = kolo::torch::as_tensor(sampler.indices());
    for (std::int64_t i = 0; i + batch <= perm.size(0); i += batch) {
      auto idx = perm.slice(0, i, i + batch);
      opt.zero_grad();
      auto loss = torch::mse_loss(model->forward(x.index_select(0, idx)), y.index_select(0, idx));
      loss.backward();
      opt.step();
    }
    if (comm.rank() == 0) std::printf("epoch %d: loss %.5f\n", epoch + 1, torch::mse_loss(model->forward(x), y).item<double>());
  }
  if (comm.rank() == 0) torch::save(model, "minimal.pt");
}
