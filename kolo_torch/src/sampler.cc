// DistributedSampler: deterministic shuffled shards (no LibTorch here).
#include "kolo/torch/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "kolo/kolo.h"

namespace kolo::torch {

namespace {

// Unbiased integer in [0, bound) by rejection, so the result depends only on
// the generator (std::uniform_int_distribution is implementation-defined).
std::uint64_t uniform_below(std::mt19937_64& gen, std::uint64_t bound) {
  const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % bound);
  std::uint64_t x;
  do x = gen();
  while (x >= limit);
  return x % bound;
}

}  // namespace

std::vector<std::size_t> shuffled_indices(std::size_t n, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::size_t> v(n);
  std::iota(v.begin(), v.end(), std::size_t{0});
  // Mix seed and epoch so that (seed, epoch+1) and (seed+1, epoch) differ.
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(epoch), static_cast<std::uint32_t>(epoch >> 32)};
  std::mt19937_64 gen(seq);
  for (std::size_t i = n; i > 1; --i) std::swap(v[i - 1], v[uniform_below(gen, i)]);
  return v;
}

DistributedSampler::DistributedSampler(Communicator& comm, std::size_t dataset_size,
                                       SamplerOptions options)
    : DistributedSampler(comm.rank(), comm.size(), dataset_size, options) {}

DistributedSampler::DistributedSampler(int rank, int size, std::size_t dataset_size,
                                       SamplerOptions options)
    : rank_(rank), size_(size), n_(dataset_size), options_(options) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(fmt::format("kolo: DistributedSampler: rank {} is not in [0, {})", rank, size));
  build();
  if (num_samples_ == 0)
    throw Error(fmt::format("kolo rank {}: DistributedSampler: a data set of {} samples gives "
                            "rank {} of {} nothing to do{}",
                            rank, n_, rank, size, options_.drop_last ? " with drop_last" : ""));
}

// This rank's shard of the epoch's order from start_ on. After a reshard
// near the end of an epoch the shard may be empty: the epoch is done.
void DistributedSampler::build() {
  std::vector<std::size_t> order;
  if (options_.shuffle) {
    order = shuffled_indices(n_, options_.seed, epoch_);
  } else {
    order.resize(n_);
    std::iota(order.begin(), order.end(), std::size_t{0});
  }
  order.erase(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(start_));
  const auto s = static_cast<std::size_t>(size_);
  num_samples_ = shard_length(start_);
  const std::size_t total = total_size();
  // Pad by repeating from the start (as often as needed when n < size).
  for (std::size_t i = 0; order.size() < total; ++i) order.push_back(order[i]);
  indices_.clear();
  indices_.reserve(num_samples_);
  for (std::size_t i = static_cast<std::size_t>(rank_); i < total; i += s) indices_.push_back(order[i]);
}

void DistributedSampler::set_epoch(std::uint64_t epoch) {
  if (resume_pending_ && epoch == epoch_) {
    resume_pending_ = false;  // keep the restored position
    return;
  }
  resume_pending_ = false;
  if (epoch != epoch_ || start_ != 0 || indices_.empty()) {
    epoch_ = epoch;
    start_ = 0;
    build();
  }
  position_ = 0;
}

std::optional<std::vector<std::size_t>> DistributedSampler::next(std::size_t batch_size) {
  resume_pending_ = false;
  if (position_ >= indices_.size() || batch_size == 0) return std::nullopt;
  const std::size_t end = std::min(indices_.size(), position_ + batch_size);
  std::vector<std::size_t> batch(indices_.begin() + static_cast<std::ptrdiff_t>(position_),
                                 indices_.begin() + static_cast<std::ptrdiff_t>(end));
  position_ = end;
  return batch;
}

std::size_t DistributedSampler::shard_length(std::size_t start) const {
  const std::size_t left = n_ - start, s = static_cast<std::size_t>(size_);
  return options_.drop_last ? left / s : (left + s - 1) / s;
}

std::uint64_t DistributedSampler::consumed() const {
  // Padding repeats samples past the end of the order: those count once.
  return std::min<std::uint64_t>(n_, start_ + position_ * static_cast<std::uint64_t>(size_));
}

void DistributedSampler::reshard(Communicator& comm, std::uint64_t epoch, std::uint64_t consumed) {
  reshard(comm.rank(), comm.size(), epoch, consumed);
}

void DistributedSampler::reshard(int rank, int size, std::uint64_t epoch, std::uint64_t consumed) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(fmt::format("kolo: DistributedSampler::reshard: rank {} is not in [0, {})", rank, size));
  if (consumed > n_)
    throw Error(fmt::format("kolo rank {}: DistributedSampler::reshard: {} samples consumed, but the "
                            "data set has {}",
                            rank, consumed, n_));
  rank_ = rank;
  size_ = size;
  epoch_ = epoch;
  start_ = static_cast<std::size_t>(consumed);
  position_ = 0;
  resume_pending_ = true;  // the next set_epoch(same epoch) goes on from here
  build();
}

void DistributedSampler::set_state(const SamplerState& state) {
  if (state.start > n_)
    throw Error(fmt::format("kolo rank {}: DistributedSampler: start {} is past the data set's {} "
                            "samples",
                            rank_, state.start, n_));
  const std::size_t length = shard_length(static_cast<std::size_t>(state.start));
  if (state.position > length)
    throw Error(fmt::format("kolo rank {}: DistributedSampler: position {} is past the shard "
                            "length {} (was the checkpoint written with another rank count?)",
                            rank_, state.position, length));
  if (state.epoch != epoch_ || state.start != start_) {
    epoch_ = state.epoch;
    start_ = static_cast<std::size_t>(state.start);
    build();
  }
  position_ = static_cast<std::size_t>(state.position);
  resume_pending_ = true;
}

bool DistributedSampler::take_resume_pending() {
  const bool p = resume_pending_;
  resume_pending_ = false;
  return p;
}

}  // namespace kolo::torch
