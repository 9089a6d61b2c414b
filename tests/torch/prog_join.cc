// torch_rank_prog's Join modes: uneven inputs per rank under
// kolo::torch::Join (join), and the same training computed in one process,
// the driver's reference (join_ref).
#include "prog_common.h"

#include <limits>
#include <memory>

namespace prog {

namespace {

constexpr long kJoinBatch = 8;
// Rank q's batch s: a block of the fixed data set.
torch::Tensor join_rows(int q, int size, long s) {
  const long base = (s * size + q) * kJoinBatch;
  return torch::arange(base, base + kJoinBatch, torch::kInt64);
}

std::unique_ptr<torch::optim::SGD> join_sgd(Net& net) {
  return std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
}

}  // namespace

// join: uneven inputs (--batches 3,6 per rank) under kolo::torch::Join.
int mode_join(kolo::Communicator& comm, const Args& a) {
  const int r = comm.rank();
  const auto batches = parse_list(a.get("batches", "3,6"));
  if (static_cast<int>(batches.size()) != comm.size()) check_failed("--batches needs one count per rank");
  Data d = make_data(2048);
  torch::manual_seed(7);
  Net net;
  DistributedOptimizer opt(comm, net, join_sgd(net), optimizer_options(a));
  // --scaler: loss scaling through the Join; an inf in rank --overflow-rank's
  // loss at step --overflow-step makes every rank skip it, shadows included.
  const bool use_scaler = a.flag("scaler");
  kolo::torch::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
  kolo::torch::Join join(opt, use_scaler ? &scaler : nullptr);
  for (long s = 0; s < batches[r]; ++s) {
    const int training = join.begin_step();
    long expect = 0;
    for (auto n : batches) expect += n > s;
    if (training != expect) check_failed("begin_step() counted " + std::to_string(training) + " ranks");
    opt.zero_grad();
    auto rows = join_rows(r, comm.size(), s);
    auto loss = torch::nn::functional::cross_entropy(net.forward(d.x.index_select(0, rows)),
                                                     d.y.index_select(0, rows));
    if (!use_scaler) {
      loss.backward();
      opt.step();
      continue;
    }
    if (s == a.num("overflow-step", -1) && r == a.num("overflow-rank", 1))
      loss = loss * std::numeric_limits<float>::infinity();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  }
  const auto shadowed = join.finish();
  if (use_scaler) {
    const double hi = kolo::torch::allreduce_scalar(comm, scaler.get_scale(), kolo::Op::Max);
    const double lo = kolo::torch::allreduce_scalar(comm, scaler.get_scale(), kolo::Op::Min);
    if (hi != lo) check_failed("the ranks' loss scales differ after Join::finish()");
    std::printf("rank %d: final scale %g\n", r, scaler.get_scale());
  }
  const long most = *std::max_element(batches.begin(), batches.end());
  if (shadowed != most - batches[r]) check_failed("finish() shadowed " + std::to_string(shadowed) + " steps");
  check_identical(comm, net, "after Join::finish()");
  std::printf("rank %d: %ld own steps, %lld shadowed\n", r, batches[r], static_cast<long long>(shadowed));
  if (r == 0 && !a.get("out").empty()) write_params(net, a.get("out"));
  return 0;
}

// join_ref: the same training computed in one process (the reference). In
// step s the gradient is the mean loss over the batches of the ranks that
// still have one (equal batch sizes: the mean of their means); step
// --skip-step is left out (what an overflow does).
int mode_join_ref(kolo::Communicator&, const Args& a) {
  const auto batches = parse_list(a.get("batches", "3,6"));
  const int size = static_cast<int>(batches.size());
  Data d = make_data(2048);
  torch::manual_seed(7);
  Net net;
  auto sgd = join_sgd(net);
  const long most = *std::max_element(batches.begin(), batches.end());
  for (long s = 0; s < most; ++s) {
    std::vector<torch::Tensor> rows;
    for (int q = 0; q < size; ++q)
      if (batches[static_cast<std::size_t>(q)] > s) rows.push_back(join_rows(q, size, s));
    if (s == a.num("skip-step", -1)) continue;
    auto idx = torch::cat(rows);
    sgd->zero_grad();
    torch::nn::functional::cross_entropy(net.forward(d.x.index_select(0, idx)), d.y.index_select(0, idx))
        .backward();
    sgd->step();
  }
  write_params(net, a.get("out"));
  return 0;
}

}  // namespace prog
