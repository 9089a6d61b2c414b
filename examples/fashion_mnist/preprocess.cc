// fashion_mnist_preprocess — builds the main job's training cache once, in
// parallel: every training image augmented (random shift + elastic jitter,
// augment.h), normalised, written as f32 [1, 28, 28] records with their
// labels into one kolo::data cache that `fashion_mnist --cache FILE` trains
// from (memory-mapped, no decoding or augmentation during training).
//
//   kolorun -np 2 build/examples/fashion_mnist/fashion_mnist_preprocess --out fmnist-train.kcache
//   kolorun -np 2 build/examples/fashion_mnist/fashion_mnist --cache fmnist-train.kcache
//
// Running it again with the same data and options reuses the cache; other
// options or data (or a new augmentation version) rebuild it. The file is
// byte-identical whatever the number of ranks. No LibTorch here.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <kolo/data/cache.h>
#include <kolo/kolo.h>

#include <cstdio>

#include "augment.h"
#include "idx.h"

namespace {

// Bump when augment()'s output changes for the same options: old caches
// then become stale instead of silently training on the old augmentation.
constexpr int kAugmentVersion = 1;

struct Options {
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string out = "fashion_mnist_train.kcache";
  std::string augment = "elastic";
  int copies = 1;
  std::size_t limit = 0;
  std::size_t chunk = 64;
  bool force = false;
  bool no_progress = false;
  fmnist::AugmentOptions aug;
};

int run(Options& o) {
  auto comm = kolo::init();
  o.aug.kind = fmnist::parse_augment(o.augment);
  const std::string images = o.data + "/train-images-idx3-ubyte.gz";
  const std::string labels = o.data + "/train-labels-idx1-ubyte.gz";
  fmnist::Split train{fmnist::read_images(images), fmnist::read_labels(labels)};
  if (train.images.count != train.labels.size())
    throw std::runtime_error(fmt::format("{}: {} labels for {} images", labels, train.labels.size(),
                                         train.images.count));
  const std::size_t n = o.limit ? std::min(o.limit, train.images.count) : train.images.count;
  const int rows = static_cast<int>(train.images.rows), cols = static_cast<int>(train.images.cols);

  kolo::data::CacheSpec spec;
  spec.num_samples = n * static_cast<std::size_t>(o.copies);
  spec.transform = fmt::format("fashion-mnist/{}/v{}", o.augment, kAugmentVersion);
  spec.inputs = kolo::data::InputHash()
                    .file(images)
                    .file(labels)
                    .number(n)
                    .number(static_cast<std::uint64_t>(o.copies))
                    .number(o.aug.seed)
                    .number(static_cast<std::uint64_t>(o.aug.max_shift))
                    .text(fmt::format("{:a} {:a}", o.aug.alpha, o.aug.sigma))
                    .value();
  spec.dtype = kolo::DType::F32;
  spec.shape = {1, rows, cols};

  // Sample i is image i mod n, augmented with randomness seeded by i, so
  // each copy of an image is a different variant.
  auto transform = [&](std::uint64_t i, kolo::data::Record& r) {
    const std::size_t img = static_cast<std::size_t>(i % n);
    const auto px = fmnist::augment(&train.images.pixels[img * rows * cols], rows, cols, i, o.aug);
    r.assign(px.data(), px.size());
    r.label = train.labels[img];
  };
  kolo::data::BuildOptions bo;
  bo.chunk = o.chunk;
  bo.force = o.force;
  bo.progress = !o.no_progress;
  kolo::data::build_cache(comm, o.out, spec, transform, bo);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Builds fashion_mnist's augmented training cache (run under kolorun -np N)"};
  app.add_option("--data", o.data, "directory with the gzipped IDX files")->capture_default_str();
  app.add_option("--out", o.out, "the cache file")->capture_default_str();
  app.add_option("--augment", o.augment, "none, shift or elastic (shift + elastic jitter)")
      ->check(CLI::IsMember({"none", "shift", "elastic"}))
      ->capture_default_str();
  app.add_option("--copies", o.copies, "augmented variants of each image")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--seed", o.aug.seed, "augmentation seed")->capture_default_str();
  app.add_option("--max-shift", o.aug.max_shift, "largest shift in pixels")->capture_default_str();
  app.add_option("--alpha", o.aug.alpha, "elastic displacement in pixels")->capture_default_str();
  app.add_option("--sigma", o.aug.sigma, "elastic smoothing in pixels")->capture_default_str();
  app.add_option("--limit", o.limit, "only the first N training images");
  app.add_option("--chunk", o.chunk, "samples per rank per round")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--force", o.force, "rebuild even if the cache is up to date");
  app.add_flag("--no-progress", o.no_progress, "no progress bar");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\nfashion_mnist_preprocess: %s\n", e.what());
    return 1;
  }
}
