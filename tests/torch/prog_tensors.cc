// torch_rank_prog's modes on kolo::torch's tensor collectives: broadcast and
// allreduce (tensors), the tensors they refuse (bad_tensors), a shape that
// differs between ranks at broadcast_parameters (mismatch), and TorchSampler
// feeding torch::data::make_data_loader (loader).
#include "prog_common.h"

#include <memory>

namespace prog {

// tensors: broadcast / allreduce / allreduce_scalar on tensors.
int mode_tensors(kolo::Communicator& comm, const Args&) {
  const int r = comm.rank(), N = comm.size();
  // Broadcast of a 2-D tensor.
  auto m = torch::arange(12, torch::kFloat32).reshape({3, 4}) * (r + 1);
  kolo::torch::broadcast(comm, m, 0);
  if (!torch::equal(m, torch::arange(12, torch::kFloat32).reshape({3, 4}))) check_failed("broadcast");
  // broadcast_parameters takes a strided parameter (through its own copy).
  auto base = torch::arange(12, torch::kFloat32).reshape({3, 4}) * (r + 1);
  kolo::torch::broadcast_parameters(comm, kolo::torch::NamedTensors{{"w.t", base.t()}}, 0);
  if (!torch::equal(base, torch::arange(12, torch::kFloat32).reshape({3, 4})))
    check_failed("broadcast_parameters of a strided tensor");
  // Allreduce average and sum, f64 and i64.
  auto v = torch::full({5}, static_cast<double>(r + 1), torch::kFloat64);
  kolo::torch::allreduce(comm, v, kolo::Op::Average);
  if (!torch::allclose(v, torch::full({5}, (N + 1) / 2.0, torch::kFloat64))) check_failed("allreduce average");
  auto i = torch::full({3}, r + 1, torch::kInt64);
  kolo::torch::allreduce(comm, i, kolo::Op::Sum);
  if (i[0].item<std::int64_t>() != N * (N + 1) / 2) check_failed("allreduce sum i64");
  if (kolo::torch::allreduce_scalar(comm, r + 1.0, kolo::Op::Max) != N) check_failed("allreduce_scalar max");
  std::printf("rank %d: tensor collectives ok\n", r);
  return 0;
}

// bad_tensors: strided, sparse, non-CPU, bool and complex tensors refused.
// Tensors the collectives refuse: each call must throw before any rank
// communicates (so the ranks stay in step); every message is printed for the
// driver to assert on, then a good allreduce shows the job goes on.
int mode_bad_tensors(kolo::Communicator& comm, const Args&) {
  const auto expect_error = [&](const char* what, const auto& call) {
    try {
      call();
    } catch (const kolo::Error& e) {
      std::printf("%s: %s\n", what, e.what());
      return;
    }
    check_failed(std::string(what) + " was accepted");
  };
  auto strided = torch::zeros({3, 4}).t();
  expect_error("non-contiguous allreduce", [&] { kolo::torch::allreduce(comm, strided); });
  expect_error("non-contiguous broadcast", [&] { kolo::torch::broadcast(comm, strided, 0); });
  auto sparse = torch::eye(3).to_sparse();
  expect_error("sparse allreduce", [&] { kolo::torch::allreduce(comm, sparse); });
  expect_error("sparse broadcast", [&] { kolo::torch::broadcast(comm, sparse, 0); });
  auto meta = torch::empty({4}, torch::TensorOptions().device(torch::kMeta));
  expect_error("meta allreduce", [&] { kolo::torch::allreduce(comm, meta); });
  auto flags = torch::ones({4}, torch::kBool);
  expect_error("bool allreduce", [&] { kolo::torch::allreduce(comm, flags, kolo::Op::Sum); });
  auto cplx = torch::zeros({2}, torch::kComplexFloat);
  expect_error("complex broadcast", [&] { kolo::torch::broadcast(comm, cplx, 0); });
  auto ok = torch::full({2}, 1.0f);
  kolo::torch::allreduce(comm, ok, kolo::Op::Sum);
  if (ok[0].item<float>() != comm.size()) check_failed("allreduce after the refused calls");
  std::printf("rank %d: bad tensors refused\n", comm.rank());
  return 0;
}

// mismatch: rank 1 has a different layer shape at broadcast_parameters.
int mode_mismatch(kolo::Communicator& comm, const Args&) {
  Net net(comm.rank() == 1 ? 12 : 16);
  kolo::torch::broadcast_parameters(comm, net, 0);
  return 0;
}

namespace {

// A trivial data set for the loader test: sample i is the scalar i.
struct Range : torch::data::datasets::Dataset<Range> {
  explicit Range(std::size_t n) : n(n) {}
  torch::data::Example<> get(std::size_t i) override {
    auto t = torch::tensor(static_cast<std::int64_t>(i));
    return {t, t};
  }
  torch::optional<std::size_t> size() const override { return n; }
  std::size_t n;
};

}  // namespace

// loader: TorchSampler with torch::data::make_data_loader.
int mode_loader(kolo::Communicator& comm, const Args&) {
  auto sampler = std::make_shared<kolo::torch::DistributedSampler>(comm, 50, kolo::torch::SamplerOptions{.shuffle = true, .seed = 3});
  auto loader = torch::data::make_data_loader(Range(50).map(torch::data::transforms::Stack<>()),
                                              kolo::torch::TorchSampler(sampler),
                                              torch::data::DataLoaderOptions().batch_size(4));
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    sampler->set_epoch(epoch);
    std::vector<std::size_t> got;
    for (auto& batch : *loader)
      for (std::int64_t k = 0; k < batch.data.size(0); ++k)
        got.push_back(static_cast<std::size_t>(batch.data[k].item<std::int64_t>()));
    if (got != sampler->indices()) check_failed("the data loader did not yield the sampler's shard");
  }
  std::printf("rank %d: loader ok\n", comm.rank());
  return 0;
}

}  // namespace prog
