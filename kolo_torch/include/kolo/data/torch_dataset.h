// kolo::data::CacheDataset — a torch::data dataset over a preprocessing cache
// (kolo/data/cache.h). Samples are tensors viewing the memory-mapped records:
// nothing is copied until a batch is assembled.
//
//   auto ds = kolo::data::CacheDataset::open("train.kcache");
//   auto x = ds.data();      // [n, 1, 28, 28] f32, a view of the whole file
//   auto y = ds.targets();   // [n] int64, a view of the index
//   auto loader = torch::data::make_data_loader(ds.map(torch::data::transforms::Stack<>()), sampler, 64);
#pragma once

#include <torch/data/datasets/base.h>
#include <torch/data/example.h>
#include <torch/types.h>

#include <memory>
#include <string>

#include "kolo/data/cache.h"

namespace kolo::data {

class CacheDataset : public ::torch::data::datasets::Dataset<CacheDataset> {
 public:
  explicit CacheDataset(std::shared_ptr<const Cache> cache);
  static CacheDataset open(const std::string& path, const OpenOptions& options = {});

  // Record i as a tensor of the cache's shape (1-D when it has none) and its
  // label as a 0-d int64 tensor. Both view the map and keep it alive.
  ::torch::data::Example<> get(std::size_t index) override;
  ::torch::optional<std::size_t> size() const override;

  // Every record as one [n, shape...] tensor and every label as [n] int64,
  // strided views into the map. Needs records of one length (a cache with a
  // shape always has them); throws otherwise.
  ::torch::Tensor data() const;
  ::torch::Tensor targets() const;

  const Cache& cache() const { return *cache_; }

 private:
  std::shared_ptr<const Cache> cache_;
};

}  // namespace kolo::data
