// The cache tests' LibTorch reader: opens a cache of the synthetic data set
// through kolo::data::CacheDataset as training does — per-sample get(), the
// whole-file data()/targets() views, a torch::data loader with Stack — and
// compares every tensor with cache_synthetic.h. Also checks that the
// tensors view the map (no copy). Prints "dataset ok N" or the first
// difference (exit 1).
//
//   cache_read_prog PATH SAMPLES TRANSFORM [--variable]
//   cache_read_prog --params CHECKPOINT   # "name hash" per model tensor of a kolo checkpoint
#include <kolo/data/torch_dataset.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "cache_synthetic.h"

namespace {

bool same(const torch::Tensor& t, const std::vector<float>& want) {
  auto c = t.contiguous();
  return c.scalar_type() == torch::kFloat32 && c.numel() == static_cast<std::int64_t>(want.size()) &&
         std::equal(want.begin(), want.end(), c.data_ptr<float>());
}

int fail(const std::string& what) {
  std::printf("dataset: %s\n", what.c_str());
  return 1;
}

// A kolo checkpoint is a 32-byte header and a torch::pickle_save'd dict whose
// "model" maps names to tensors. Prints each tensor's name and a hash of its
// bytes (FNV-1a), sorted by name: two runs trained on the same samples print
// the same lines (the files themselves are not byte-reproducible).
int print_params(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (bytes.size() < 32) return fail("no checkpoint at " + path);
  const auto dict = torch::pickle_load(std::vector<char>(bytes.begin() + 32, bytes.end())).toGenericDict();
  std::map<std::string, torch::Tensor> params;
  for (const auto& kv : dict.at("model").toGenericDict())
    params[kv.key().toStringRef()] = kv.value().toTensor().contiguous();
  for (const auto& [name, t] : params) {
    std::uint64_t h = 1469598103934665603ull;
    const auto* p = static_cast<const unsigned char*>(t.data_ptr());
    for (std::size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
    std::printf("param %s %016llx\n", name.c_str(), static_cast<unsigned long long>(h));
  }
  return params.empty() ? fail("no model tensors in " + path) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--params") return print_params(argv[2]);
  if (argc < 4) return fail("usage: cache_read_prog PATH SAMPLES TRANSFORM [--variable]");
  const std::string path = argv[1], transform = argv[3];
  const auto n = std::stoull(argv[2]);
  const bool fixed = !(argc > 4 && std::string(argv[4]) == "--variable");
  try {
    auto ds = kolo::data::CacheDataset::open(path);
    if (ds.size().value() != n) return fail("size " + std::to_string(ds.size().value()));
    for (std::uint64_t i = 0; i < n; ++i) {
      auto ex = ds.get(i);
      if (!same(ex.data, cache_test::sample(i, transform, fixed)) || ex.target.item<std::int64_t>() != cache_test::label(i))
        return fail("get(" + std::to_string(i) + ") differs");
      if (fixed && ex.data.sizes() != torch::IntArrayRef{cache_test::kRows, cache_test::kCols})
        return fail("get(" + std::to_string(i) + ") has the wrong shape");
      if (ex.data.data_ptr() != ds.cache().data(i)) return fail("get() copied the record");
    }
    if (fixed) {
      auto x = ds.data();
      auto y = ds.targets();
      if (x.sizes() != torch::IntArrayRef{static_cast<std::int64_t>(n), cache_test::kRows, cache_test::kCols})
        return fail("data() has the wrong shape");
      if (x.data_ptr() != ds.cache().data(0)) return fail("data() copied the records");
      for (std::uint64_t i = 0; i < n; ++i)
        if (!same(x[static_cast<std::int64_t>(i)], cache_test::sample(i, transform, fixed)) ||
            y[static_cast<std::int64_t>(i)].item<std::int64_t>() != cache_test::label(i))
          return fail("data()/targets() row " + std::to_string(i) + " differs");
      // Training's way: a loader over the dataset, batches stacked.
      auto loader = torch::data::make_data_loader(ds.map(torch::data::transforms::Stack<>()),
                                                  torch::data::samplers::SequentialSampler(n), 8);
      std::uint64_t seen = 0;
      for (auto& b : *loader)
        for (std::int64_t k = 0; k < b.data.size(0); ++k, ++seen)
          if (!same(b.data[k], cache_test::sample(seen, transform, fixed)) ||
              b.target[k].item<std::int64_t>() != cache_test::label(seen))
            return fail("loader sample " + std::to_string(seen) + " differs");
      if (seen != n) return fail("the loader gave " + std::to_string(seen) + " samples");
      // Writing into a view changes this process's copy only, never the file.
      x[0].fill_(0);
    } else {
      try {
        ds.data();
        return fail("data() of records of different lengths did not throw");
      } catch (const kolo::Error& e) {
        std::printf("data(): %s\n", e.what());
      }
    }
    std::printf("dataset ok %llu\n", static_cast<unsigned long long>(n));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cache_read_prog: %s\n", e.what());
    return 1;
  }
}
