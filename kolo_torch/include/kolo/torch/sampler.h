// kolo::torch::DistributedSampler — which samples this rank trains on.
//
// This header does not include LibTorch: the sampler only deals in indices.
// (kolo/torch.h adds TorchSampler, an adapter for torch::data data loaders.)
//
// Every epoch the indices 0..n-1 are shuffled with a generator seeded by
// seed + epoch (the same on every rank: std::mt19937_64 and an unbiased
// Fisher–Yates of our own, so the order does not depend on the standard
// library), then made a multiple of the number of ranks — by repeating
// indices from the start (pad, PyTorch's default) or by dropping the tail —
// and rank r takes positions r, r + size, r + 2·size, ... Shards are disjoint,
// equally long and together cover the data set (pad) or all but < size samples
// (drop_last).
//
//   kolo::torch::DistributedSampler sampler(comm, dataset_size, {.shuffle = true, .seed = 42});
//   for (epoch...) {
//     sampler.set_epoch(epoch);
//     while (auto batch = sampler.next(batch_size)) { ... *batch is a vector of indices ... }
//   }
//
// For resume, state() gives {epoch, position} (samples of this rank's shard
// already handed out); set_state() restores it and the following
// set_epoch(same epoch) keeps that position instead of rewinding.
//
// Elastic jobs (the ranks change within an epoch): since rank r takes
// positions r, r + size, ..., ranks that have all handed out the same number
// of samples have together used a prefix of the epoch's order; consumed() is
// its length. After re-forming, reshard(new_comm, epoch, consumed) — the
// committed epoch and consumed() — deals the rest of that epoch's order among
// the new ranks (padded or dropped to a multiple of the new size, as a fresh
// epoch is): no sample twice, none skipped. The following set_epoch(same
// epoch) keeps going there; the next epoch is dealt whole again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace kolo {
class Communicator;
}

namespace kolo::torch {

struct SamplerOptions {
  bool shuffle = true;
  std::uint64_t seed = 0;
  // false: pad to a multiple of size by repeating from the start;
  // true: drop the last (n mod size) samples of the (shuffled) order.
  bool drop_last = false;
};

struct SamplerState {
  std::uint64_t epoch = 0;
  std::uint64_t position = 0;  // samples of this rank's shard already handed out
  std::uint64_t start = 0;     // the shards deal the epoch's order from here (reshard)
};

class DistributedSampler {
 public:
  DistributedSampler(Communicator& comm, std::size_t dataset_size, SamplerOptions options = {});
  // Without a communicator: for tests, or to shard by hand.
  DistributedSampler(int rank, int size, std::size_t dataset_size, SamplerOptions options = {});

  // Reshuffles for `epoch` and rewinds (see the resume note above).
  void set_epoch(std::uint64_t epoch);
  std::uint64_t epoch() const { return epoch_; }

  // The next up to batch_size indices of this rank's shard; nullopt at the end.
  std::optional<std::vector<std::size_t>> next(std::size_t batch_size);
  void rewind() { position_ = 0; }

  // Elastic jobs (see above): the length of the epoch's order used so far by
  // all ranks together, when every rank is at this rank's position.
  std::uint64_t consumed() const;
  // Deals epoch's order from `consumed` on among comm's ranks; position 0.
  void reshard(Communicator& comm, std::uint64_t epoch, std::uint64_t consumed);
  void reshard(int rank, int size, std::uint64_t epoch, std::uint64_t consumed);

  // This rank's shard for the current epoch, in order.
  const std::vector<std::size_t>& indices() const { return indices_; }
  std::size_t num_samples() const { return num_samples_; }  // per rank per epoch
  std::size_t total_size() const { return num_samples_ * static_cast<std::size_t>(size_); }
  std::size_t dataset_size() const { return n_; }
  std::size_t position() const { return position_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const SamplerOptions& options() const { return options_; }

  SamplerState state() const { return {epoch_, position_, start_}; }
  void set_state(const SamplerState& state);
  // True once after set_state(); used by TorchSampler::reset() to keep the position.
  bool take_resume_pending();

 private:
  void build();
  std::size_t shard_length(std::size_t start) const;  // per rank, dealing from start

  int rank_;
  int size_;
  std::size_t n_;
  SamplerOptions options_;
  std::size_t num_samples_ = 0;
  std::size_t start_ = 0;  // first position of the epoch's order the shards deal
  std::uint64_t epoch_ = 0;
  std::size_t position_ = 0;
  bool resume_pending_ = false;
  std::vector<std::size_t> indices_;
};

// The permutation of 0..n-1 the sampler uses for (seed, epoch): exposed so that
// tests and single-process baselines can reproduce the global order.
std::vector<std::size_t> shuffled_indices(std::size_t n, std::uint64_t seed, std::uint64_t epoch);

}  // namespace kolo::torch
