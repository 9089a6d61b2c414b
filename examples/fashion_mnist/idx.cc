#include "idx.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace fmnist {

namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", path, what));
}

// The whole (decompressed) file. gzread also reads files that are not gzipped.
std::vector<std::uint8_t> read_all(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) fail(path, errno ? std::strerror(errno) : "cannot open");
  std::vector<std::uint8_t> data;
  std::uint8_t buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      fail(path, "corrupt gzip data (" + msg + ")");
    }
    if (n == 0) break;
    data.insert(data.end(), buf, buf + n);
  }
  // gzread returns 0 at a truncated stream's end too; gzerror tells them apart.
  int code = 0;
  const char* msg = gzerror(f, &code);
  if (code != Z_OK && code != Z_STREAM_END) {
    const std::string m = msg;
    gzclose(f);
    fail(path, "corrupt gzip data (" + m + ")");
  }
  gzclose(f);
  return data;
}

std::uint32_t be32(const std::vector<std::uint8_t>& d, std::size_t at) {
  return (std::uint32_t{d[at]} << 24) | (std::uint32_t{d[at + 1]} << 16) |
         (std::uint32_t{d[at + 2]} << 8) | std::uint32_t{d[at + 3]};
}

}  // namespace

Images read_images(const std::string& path) {
  auto d = read_all(path);
  if (d.size() < 16 || be32(d, 0) != kImagesMagic)
    fail(path, "not an IDX image file (expected magic 0x00000803)");
  Images im;
  im.count = be32(d, 4);
  im.rows = be32(d, 8);
  im.cols = be32(d, 12);
  const std::size_t want = im.count * im.rows * im.cols;
  if (d.size() - 16 != want)
    fail(path, fmt::format("truncated or corrupt: header says {} images of {}x{} ({} bytes), the "
                           "file holds {} bytes",
                           im.count, im.rows, im.cols, want, d.size() - 16));
  im.pixels.assign(d.begin() + 16, d.end());
  return im;
}

std::vector<std::uint8_t> read_labels(const std::string& path) {
  auto d = read_all(path);
  if (d.size() < 8 || be32(d, 0) != kLabelsMagic)
    fail(path, "not an IDX label file (expected magic 0x00000801)");
  const std::size_t n = be32(d, 4);
  if (d.size() - 8 != n)
    fail(path, fmt::format("truncated or corrupt: header says {} labels, the file holds {}", n,
                           d.size() - 8));
  std::vector<std::uint8_t> labels(d.begin() + 8, d.end());
  for (auto l : labels)
    if (l >= 10) fail(path, fmt::format("label {} is not a class (0..9)", l));
  return labels;
}

Dataset load(const std::string& dir) {
  Dataset ds;
  auto split = [&](const char* prefix, Split& s) {
    const std::string img = fmt::format("{}/{}-images-idx3-ubyte.gz", dir, prefix);
    const std::string lab = fmt::format("{}/{}-labels-idx1-ubyte.gz", dir, prefix);
    s.images = read_images(img);
    s.labels = read_labels(lab);
    if (s.images.count != s.labels.size())
      fail(lab, fmt::format("{} labels for {} images in {}", s.labels.size(), s.images.count, img));
  };
  split("train", ds.train);
  split("t10k", ds.test);
  if (ds.train.images.rows != ds.test.images.rows || ds.train.images.cols != ds.test.images.cols)
    fail(dir, "train and test images differ in size");
  return ds;
}

}  // namespace fmnist
