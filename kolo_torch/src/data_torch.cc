// CacheDataset: torch tensors over a Cache's memory map (from_blob with a
// deleter that holds the map, so a tensor outlives the dataset safely).
#include "kolo/data/torch_dataset.h"

#include <fmt/format.h>
#include <torch/torch.h>


namespace kolo::data {

namespace {

c10::ScalarType scalar_type(DType t) {
  switch (t) {
    case DType::F32: return ::torch::kFloat32;
    case DType::F64: return ::torch::kFloat64;
    case DType::F16: return ::torch::kFloat16;
    case DType::BF16: return ::torch::kBFloat16;
    case DType::I32: return ::torch::kInt32;
    case DType::I64: return ::torch::kInt64;
    case DType::U8: return ::torch::kUInt8;
  }
  return ::torch::kUInt8;
}

}  // namespace

CacheDataset::CacheDataset(std::shared_ptr<const Cache> cache) : cache_(std::move(cache)) {}

CacheDataset CacheDataset::open(const std::string& path, const OpenOptions& options) {
  return CacheDataset(std::make_shared<const Cache>(Cache::open(path, options)));
}

::torch::optional<std::size_t> CacheDataset::size() const { return static_cast<std::size_t>(cache_->size()); }

::torch::data::Example<> CacheDataset::get(std::size_t index) {
  const Cache& c = *cache_;
  const auto type = scalar_type(c.spec().dtype);
  std::vector<std::int64_t> shape = c.spec().shape;
  if (shape.empty()) shape = {static_cast<std::int64_t>(c.bytes(index) / dtype_size(c.spec().dtype))};
  auto keep = [cache = cache_](void*) {};
  auto x = ::torch::from_blob(const_cast<void*>(c.data(index)), shape, keep, ::torch::TensorOptions(type));
  const auto* label = c.label_data() + 3 * index;
  auto y = ::torch::from_blob(const_cast<std::int64_t*>(label), {}, keep, ::torch::TensorOptions(::torch::kInt64));
  return {x, y};
}

::torch::Tensor CacheDataset::data() const {
  const Cache& c = *cache_;
  const auto elem = dtype_size(c.spec().dtype);
  if (c.size() > 0 && c.stride() == 0)
    throw Error(rank_prefix() +
                fmt::format("cache '{}': its records differ in length, so they are not one tensor (use get(i))",
                            c.path()));
  std::vector<std::int64_t> sizes{static_cast<std::int64_t>(c.size())};
  std::vector<std::int64_t> inner = c.spec().shape;
  if (inner.empty()) inner = {c.size() ? static_cast<std::int64_t>(c.bytes(0) / elem) : 0};
  sizes.insert(sizes.end(), inner.begin(), inner.end());
  // Contiguous inside a record; records c.stride() bytes apart.
  std::vector<std::int64_t> strides(sizes.size(), 1);
  for (std::size_t d = sizes.size() - 1; d > 1; --d) strides[d - 1] = strides[d] * sizes[d];
  strides[0] = static_cast<std::int64_t>(c.stride() / elem);
  if (c.size() == 0) return ::torch::empty(sizes, ::torch::TensorOptions(scalar_type(c.spec().dtype)));
  return ::torch::from_blob(const_cast<void*>(c.data(0)), sizes, strides, [cache = cache_](void*) {},
                            ::torch::TensorOptions(scalar_type(c.spec().dtype)));
}

::torch::Tensor CacheDataset::targets() const {
  const Cache& c = *cache_;
  const auto n = static_cast<std::int64_t>(c.size());
  if (n == 0) return ::torch::empty({0}, ::torch::kInt64);
  return ::torch::from_blob(const_cast<std::int64_t*>(c.label_data()), {n}, {3}, [cache = cache_](void*) {},
                            ::torch::TensorOptions(::torch::kInt64));
}

}  // namespace kolo::data
