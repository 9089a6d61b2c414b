// kolo_torch in an elastic job (elastic_test.sh "torch"): a real training —
// DistributedOptimizer, DistributedSampler — that survives a lost worker in
// the same process, takes in a worker that joins it, and a single-process
// replay that checks it.
//
//   torch_elastic_worker DIR [--hold-for-join]   under kolorun --min-np ...: trains
//   torch_elastic_worker DIR --replay            alone: checks DIR's result
//
// Training: 480 samples of a fixed regression problem, an MLP in double,
// SGD with momentum, batch 4 per rank, 2 epochs, a commit every 4 steps (the
// parameters, the optimizer's state, the sampler's epoch and consumed(), the
// step count) kept in memory. When a collective fails, every survivor
// restores the commit, forms the next communicator with kolo::init(), hands
// it to the DistributedOptimizer (reform) and syncs. When kolorun has
// published a newer generation (a worker joins; rank 0 looks after every
// step and tells the others), every rank commits and does the same. A
// newcomer constructs the optimizer and the sampler on the new communicator
// — the constructor's collectives are reform's — and syncs with them: the
// lowest rank that held state broadcasts the parameters, the optimizer's
// state and the commit's epoch, consumed() and step count, and the sampler
// deals the rest of the epoch (reshard). Each step the ranks gather the
// step's sample indices into their logs; at the end the lowest rank whose
// log goes back to the first step writes DIR/committed.txt — per committed
// step "epoch E from P size S start T: indices" — and DIR/params.txt.
//
// --hold-for-join: in a world smaller than the first one, after 8 steps rank
// 0 waits (up to 45 s) for a newer generation before going on, so the test's
// newcomer joins before the training ends however slow this machine is.
//
// Replay: checks that committed.txt deals every epoch exactly once (and a
// short last batch's padding as DistributedSampler pads) — the
// steps' ranges [P, P + S·4) follow each other from 0 to 480, and each step's
// indices are those positions of the epoch's order — then trains one process
// on the same global batches (SGD on the mean over S·4 samples, which is what
// averaging S ranks' means gives) and compares the parameters with
// params.txt. Prints "replay: OK ..." and exits 0, or names the difference and
// exits 1.
#include <kolo/kolo.h>
#include <kolo/torch.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kSamples = 480, kBatch = 4, kFeatures = 6;
constexpr std::uint64_t kEpochs = 2, kSeed = 7;
constexpr int kCommitEvery = 4;
constexpr double kLr = 0.05, kMomentum = 0.9;

struct NetImpl : torch::nn::Module {
  NetImpl() : fc1(register_module("fc1", torch::nn::Linear(kFeatures, 16))),
              fc2(register_module("fc2", torch::nn::Linear(16, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::tanh(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

Net make_net() {
  torch::manual_seed(0);  // the same start in every process (the elastic run also broadcasts)
  Net net;
  net->to(torch::kDouble);
  return net;
}

// The batch of the given sample indices: x_ij = sin(0.1·i·(j+1) + j), y_i = Σ_j x_ij/(j+1) + 0.1·cos(i).
std::pair<torch::Tensor, torch::Tensor> batch_of(const std::vector<std::size_t>& idx) {
  auto x = torch::empty({static_cast<long>(idx.size()), static_cast<long>(kFeatures)}, torch::kDouble);
  auto y = torch::empty({static_cast<long>(idx.size()), 1}, torch::kDouble);
  auto xa = x.accessor<double, 2>();
  auto ya = y.accessor<double, 2>();
  for (std::size_t r = 0; r < idx.size(); ++r) {
    const double i = static_cast<double>(idx[r]);
    double t = 0.1 * std::cos(i);
    for (std::size_t j = 0; j < kFeatures; ++j) {
      xa[r][j] = std::sin(0.1 * i * (j + 1) + j);
      t += xa[r][j] / (j + 1);
    }
    ya[r][0] = t;
  }
  return {x, y};
}

torch::Tensor loss_of(Net& net, const std::vector<std::size_t>& idx) {
  auto [x, y] = batch_of(idx);
  return torch::mse_loss(net->forward(x), y);
}

std::string save_optimizer(const torch::optim::Optimizer& opt) {
  std::string bytes;
  torch::serialize::OutputArchive archive;
  opt.save(archive);
  archive.save_to([&](const void* p, std::size_t n) {
    bytes.append(static_cast<const char*>(p), n);
    return n;
  });
  return bytes;
}

void load_optimizer(torch::optim::Optimizer& opt, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  opt.load(archive);
}

void write_params(Net& net, const std::string& path) {
  std::ofstream out(path);
  out.precision(17);
  for (const auto& p : net->parameters()) {
    auto flat = p.detach().reshape({-1});
    for (long i = 0; i < flat.numel(); ++i) out << flat[i].item<double>() << "\n";
  }
}

// A committed step: where in which epoch its global batch began, how many
// ranks took part, where their sampler's deal began (0, or the reshard's
// consumed), and the samples they trained on (rank by rank).
struct Step {
  std::uint64_t epoch, from;
  int size;
  std::uint64_t start;
  std::vector<std::int64_t> indices;
};

struct Commit {
  std::vector<torch::Tensor> params;
  std::string optimizer;
  std::uint64_t epoch = 0, consumed = 0;
  std::int64_t steps = 0;  // committed steps
};

struct HostsUpdated {};

int train(const std::string& dir, bool hold_for_join) {
  kolo::Communicator comm = kolo::init();
  const int first_size = comm.size();
  Net net = make_net();
  auto sgd = std::make_unique<torch::optim::SGD>(net->parameters(),
                                                 torch::optim::SGDOptions(kLr).momentum(kMomentum));
  torch::optim::SGD* inner = sgd.get();
  kolo::torch::DistributedOptimizer opt(comm, *net, std::move(sgd));
  kolo::torch::DistributedSampler sampler(comm, kSamples, {.shuffle = true, .seed = kSeed});

  std::vector<Step> log;  // steps log_from + 1 on; those past the commit are dropped on recovery
  std::int64_t steps = 0, steps_in_generation = 0, log_from = 0;
  std::uint64_t epoch = 0;
  Commit commit;
  auto take_commit = [&] {
    commit.params.clear();
    for (const auto& p : net->parameters()) commit.params.push_back(p.detach().clone());
    commit.optimizer = save_optimizer(*inner);
    commit.epoch = sampler.epoch();
    commit.consumed = sampler.consumed();
    commit.steps = steps;
  };
  // Every member of a generation runs this, in the same order: the first
  // ranks at the start, survivors after restoring the commit and reform(),
  // a newcomer after its constructors. The root is the lowest rank that held
  // the job's state before (rank 0 at the start): kolorun numbers a
  // generation's workers by host, so a newcomer may be rank 0.
  bool fresh = true;
  auto sync = [&] {
    std::uint8_t mine = fresh ? 1 : 0;
    std::vector<std::uint8_t> every(static_cast<std::size_t>(comm.size()));
    comm.allgather(&mine, every.data(), 1, kolo::DType::U8);
    const auto held = std::find(every.begin(), every.end(), 0);
    const int root = held == every.end() ? 0 : static_cast<int>(held - every.begin());
    kolo::torch::broadcast_parameters(comm, *net, root);
    kolo::torch::broadcast_optimizer_state(comm, *inner, root);
    std::int64_t at[3] = {static_cast<std::int64_t>(commit.epoch), static_cast<std::int64_t>(commit.consumed),
                          commit.steps};
    comm.broadcast(at, 3, kolo::DType::I64, root);
    sampler.reshard(comm, static_cast<std::uint64_t>(at[0]), static_cast<std::uint64_t>(at[1]));
    epoch = static_cast<std::uint64_t>(at[0]);
    steps = at[2];
    steps_in_generation = 0;
    if (fresh) log_from = steps;  // a newcomer's log starts where it joined
    fresh = false;
    take_commit();
  };
  take_commit();  // the root's is the one sync() hands out
  sync();
  if (kolo::elastic::generation(comm) > 0) {
    std::printf("joined: gen %d rank %d size %d, epoch %llu from sample %llu, step %lld\n",
                kolo::elastic::generation(comm), comm.rank(), comm.size(), static_cast<unsigned long long>(epoch),
                static_cast<unsigned long long>(commit.consumed), static_cast<long long>(steps));
    std::fflush(stdout);
  }
  while (true) {
    try {
      for (; epoch < kEpochs; ++epoch) {
        sampler.set_epoch(epoch);  // after a reshard: keeps going in this epoch
        while (true) {
          const std::uint64_t from = sampler.consumed();
          auto idx = sampler.next(kBatch);
          if (!idx) break;
          opt.zero_grad();
          loss_of(net, *idx).backward();
          opt.step();
          std::vector<std::int64_t> mine(idx->begin(), idx->end()), all(mine.size() * comm.size());
          comm.allgather(mine.data(), all.data(), mine.size(), kolo::DType::I64);
          log.push_back({epoch, from, comm.size(), sampler.state().start, all});
          ++steps, ++steps_in_generation;
          std::printf("step %lld gen %d rank %d size %d\n", static_cast<long long>(steps),
                      kolo::elastic::generation(comm), comm.rank(), comm.size());
          std::fflush(stdout);
          if (steps % kCommitEvery == 0) take_commit();
          // Every rank must leave for a newer generation at the same step: rank 0 decides.
          std::int64_t newer = 0;
          if (comm.rank() == 0) {
            const bool hold = hold_for_join && comm.size() < first_size && steps_in_generation >= 8;
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(hold ? 45 : 0);
            while (!(newer = kolo::elastic::latest_generation(comm) > kolo::elastic::generation(comm)) &&
                   std::chrono::steady_clock::now() < until)
              std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
          comm.broadcast(&newer, 1, kolo::DType::I64, 0);
          if (newer) {
            take_commit();
            throw HostsUpdated{};
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
        }
        take_commit();  // the epoch's end
      }
      break;
    } catch (const HostsUpdated&) {
      std::printf("recovering: hosts updated\n");
    } catch (const kolo::Error& e) {
      std::printf("recovering: %s\n", e.what());
    }
    std::fflush(stdout);
    {
      torch::NoGradGuard no_grad;
      auto params = net->parameters();
      for (std::size_t i = 0; i < params.size(); ++i) params[i].copy_(commit.params[i]);
    }
    load_optimizer(*inner, commit.optimizer);
    log.resize(static_cast<std::size_t>(commit.steps - log_from));
    comm = kolo::init();  // the survivors' (and newcomers') next generation
    opt.reform(comm);
    sync();
    std::printf("re-formed: gen %d rank %d size %d, epoch %llu from sample %llu\n",
                kolo::elastic::generation(comm), comm.rank(), comm.size(),
                static_cast<unsigned long long>(epoch), static_cast<unsigned long long>(commit.consumed));
    std::fflush(stdout);
  }
  std::uint8_t whole = log_from == 0 ? 1 : 0;
  std::vector<std::uint8_t> wholes(static_cast<std::size_t>(comm.size()));
  comm.allgather(&whole, wholes.data(), 1, kolo::DType::U8);
  if (comm.rank() == static_cast<int>(std::find(wholes.begin(), wholes.end(), 1) - wholes.begin())) {
    std::ofstream out(dir + "/committed.txt.tmp");
    for (const auto& s : log) {
      out << "epoch " << s.epoch << " from " << s.from << " size " << s.size << " start " << s.start << ":";
      for (auto i : s.indices) out << " " << i;
      out << "\n";
    }
    out.close();
    write_params(net, dir + "/params.txt.tmp");
    std::rename((dir + "/committed.txt.tmp").c_str(), (dir + "/committed.txt").c_str());
    std::rename((dir + "/params.txt.tmp").c_str(), (dir + "/params.txt").c_str());
  }
  std::printf("done: %lld steps\n", static_cast<long long>(steps));
  return 0;
}

int fail(const std::string& why) {
  std::printf("replay: FAILED: %s\n", why.c_str());
  return 1;
}

int replay(const std::string& dir) {
  std::ifstream in(dir + "/committed.txt");
  if (!in) return fail("no " + dir + "/committed.txt");
  std::vector<Step> steps;
  for (std::string line; std::getline(in, line);) {
    Step s{};
    char colon = 0;
    std::string w1, w2, w3, w4;
    std::istringstream ls(line);
    ls >> w1 >> s.epoch >> w2 >> s.from >> w3 >> s.size >> w4 >> s.start >> colon;
    for (std::int64_t i; ls >> i;) s.indices.push_back(i);
    steps.push_back(std::move(s));
  }
  // Exactly once: the global batches of each epoch tile [0, 480) in order,
  // and each holds the samples at those positions of the epoch's order. A
  // deal whose ranks do not divide what is left pads its last batch, as
  // DistributedSampler does: position q >= 480 repeats the deal's q - 480th.
  std::uint64_t epoch = 0, at = 0;
  int sizes_seen = 0, last_size = 0;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const Step& s = steps[k];
    if (s.epoch != epoch) {
      if (at != kSamples) return fail("epoch " + std::to_string(epoch) + " ended at " + std::to_string(at));
      epoch = s.epoch;
      at = 0;
    }
    if (s.from != at)
      return fail("step " + std::to_string(k + 1) + " begins at " + std::to_string(s.from) + ", not " +
                  std::to_string(at));
    const auto order = kolo::torch::shuffled_indices(kSamples, kSeed, s.epoch);
    const std::size_t n = s.indices.size(), size = static_cast<std::size_t>(s.size);
    // Each rank's shard has ceil(left / size) samples left; a batch takes up to kBatch.
    const std::size_t per = s.from < kSamples ? std::min(kBatch, (kSamples - s.from + size - 1) / size) : 0;
    if (per == 0 || n != per * size || s.start > s.from || (s.from - s.start) % size != 0)
      return fail("step " + std::to_string(k + 1) + " has " + std::to_string(n) + " samples from " +
                  std::to_string(s.from) + " (deal from " + std::to_string(s.start) + ")");
    // Rank r's j-th sample sits at position q = from + j·size + r of the order.
    for (std::size_t r = 0; r < size; ++r)
      for (std::size_t j = 0; j < per; ++j) {
        const std::size_t q = s.from + j * size + r;
        if (static_cast<std::size_t>(s.indices[r * per + j]) != order[q < kSamples ? q : s.start + q - kSamples])
          return fail("step " + std::to_string(k + 1) + ": rank " + std::to_string(r) +
                      " trained on the wrong sample");
      }
    at = std::min(kSamples, s.from + n);
    if (s.size != last_size) ++sizes_seen, last_size = s.size;
  }
  if (epoch + 1 != kEpochs || at != kSamples) return fail("the log ends in epoch " + std::to_string(epoch) + " at " + std::to_string(at));

  // One process, the same global batches.
  Net net = make_net();
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(kLr).momentum(kMomentum));
  for (const Step& s : steps) {
    std::vector<std::size_t> idx(s.indices.begin(), s.indices.end());
    sgd.zero_grad();
    loss_of(net, idx).backward();
    sgd.step();
  }
  write_params(net, dir + "/replayed.txt");
  std::ifstream a(dir + "/params.txt"), b(dir + "/replayed.txt");
  double worst = 0;
  std::size_t count = 0;
  for (double x, y; a >> x && b >> y; ++count) worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(y)));
  std::size_t expected = 0;
  for (const auto& p : net->parameters()) expected += static_cast<std::size_t>(p.numel());
  if (count != expected)
    return fail("params.txt holds " + std::to_string(count) + " values");
  if (worst > 1e-9) return fail("the parameters differ from the replay by " + std::to_string(worst));
  std::printf("replay: OK: %zu committed steps, %d world sizes, every sample once per epoch (and the padding), "
              "parameters within %.1e of one process\n",
              steps.size(), sizes_seen, worst);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: torch_elastic_worker DIR [--replay | --hold-for-join]\n");
    return 2;
  }
  torch::set_num_threads(1);
  try {
    if (argc > 2 && std::string(argv[2]) == "--replay") return replay(argv[1]);
    std::printf("pid %d worker %s\n", static_cast<int>(getpid()), std::getenv("KOLO_WORKER_ID") ?: "-");
    std::fflush(stdout);
    return train(argv[1], argc > 2 && std::string(argv[2]) == "--hold-for-join");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_elastic_worker: %s\n", e.what());
    return 1;
  }
}
