// Reader for the IDX files of (Fashion-)MNIST, gzipped or plain (zlib).
// No LibTorch here: the trainer turns the bytes into tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fmnist {

struct Images {
  std::size_t count = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // count*rows*cols, row-major
};

struct Split {
  Images images;
  std::vector<std::uint8_t> labels;
};

struct Dataset {
  Split train, test;
};

// Reads one IDX file. Throws std::runtime_error naming the file when it is
// missing, not gzip/IDX, of the wrong kind or truncated.
Images read_images(const std::string& path);
std::vector<std::uint8_t> read_labels(const std::string& path);

// train-{images-idx3,labels-idx1}-ubyte.gz and t10k-... from dir; checks that
// image and label counts agree and that labels are < 10.
Dataset load(const std::string& dir);

}  // namespace fmnist
