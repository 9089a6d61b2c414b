// kolo::data — preprocess a data set once, in parallel, into one cache file
// that training memory-maps.
//
// This header does not include LibTorch (kolo/data/torch_dataset.h adds the
// torch::data dataset over a Cache); it compiles as C++17.
//
//   auto comm = kolo::init();                       // under kolorun -np N
//   kolo::data::CacheSpec spec;
//   spec.num_samples = n;
//   spec.transform = "shift-jitter/v3";             // change it when the transform changes
//   spec.inputs = kolo::data::InputHash().file(images).file(labels).value();
//   spec.dtype = kolo::DType::F32;
//   spec.shape = {1, 28, 28};
//   kolo::data::build_cache(comm, "train.kcache", spec,
//       [&](std::uint64_t i, kolo::data::Record& r) { r.assign(pixels_of(i), 784); r.label = label(i); });
//   ...
//   auto cache = kolo::data::Cache::open("train.kcache");   // mmap, checksum verified
//
// Building. Sample i's record must depend on i and the inputs only (seed any
// randomness from i), so the file is byte-identical whatever the number of
// ranks. The samples go in rounds of size()·chunk: rank r transforms the r-th
// block of `chunk` samples of the round, the blocks are gathered on rank 0
// (allgatherv; no shared file system needed) and rank 0 appends them in
// sample order. Rank 0 draws a progress bar.
//
// Atomic. Rank 0 writes into an unnamed file (O_TMPFILE) in the target's
// directory, fsyncs it, links it as <path>.partial, renames that over <path>
// and fsyncs the directory: a process killed at any moment (SIGKILL
// included) leaves the previous file or none, and no temporary file. Where
// the file system has no O_TMPFILE, <path>.partial is written directly; a
// build killed then leaves that name, which the next build replaces.
//
// Reuse. build_cache first checks an existing <path> (on rank 0; the verdict
// is broadcast):
//   - a valid cache with the same spec (sample count, transform, inputs,
//     dtype, shape): reused, nothing is transformed;
//   - a kolo cache with another spec, another format version, or one that is
//     truncated or fails its checksum: rebuilt, and the reason is printed;
//   - a file that is not a kolo cache (foreign): refused with an error naming
//     it — kolo does not overwrite what it did not write.
// Cache::open (training) never rebuilds: anything wrong is an error naming
// the file and the problem, and a spec expectation that differs is "stale".
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kolo/kolo.h"

namespace kolo::data {

// One transformed sample: its bytes and an integer label.
struct Record {
  std::vector<std::uint8_t> data;
  std::int64_t label = 0;

  template <class T>
  void assign(const T* p, std::size_t n) {
    data.resize(n * sizeof(T));
    if (n) std::memcpy(data.data(), p, n * sizeof(T));
  }
};

// What a cache holds; stored in its header and compared on reuse.
struct CacheSpec {
  std::uint64_t num_samples = 0;
  // Names the transform and its version (at most 255 bytes). Change it
  // whenever the transform's output changes: that is what makes a cache stale.
  std::string transform;
  // Identifies the inputs (InputHash over the input files and parameters).
  std::uint64_t inputs = 0;
  DType dtype = DType::U8;
  // Every record's shape (at most 8 dimensions); empty: records are 1-D and
  // may differ in length.
  std::vector<std::int64_t> shape;
};

// 64-bit digest (BLAKE2b, libsodium) of the inputs: file contents, strings,
// numbers, in the order given.
class InputHash {
 public:
  InputHash();
  ~InputHash();
  InputHash(const InputHash&) = delete;
  InputHash& operator=(const InputHash&) = delete;
  InputHash& bytes(const void* p, std::size_t n);
  InputHash& text(const std::string& s);  // length-prefixed: ("ab","c") != ("a","bc")
  InputHash& number(std::uint64_t v);
  InputHash& file(const std::string& path);  // contents; throws naming an unreadable file
  std::uint64_t value() const;

 private:
  alignas(64) unsigned char state_[384];  // crypto_generichash_state
};

// sample index -> its record. May throw; the build then stops on every rank.
using Transform = std::function<void(std::uint64_t index, Record& out)>;

struct BuildOptions {
  std::size_t chunk = 64;  // samples per rank per round
  bool progress = true;    // progress bar and summary on rank 0 (stdout)
  bool force = false;      // rebuild even when a fresh cache exists
};

struct BuildResult {
  bool built = false;       // false: an existing fresh cache was reused
  std::string reason;       // why it was (re)built: "no cache yet", "stale: ...", "truncated: ..."
  std::uint64_t bytes = 0;  // file size
  double seconds = 0;       // building time (0 when reused)
};

// Collective over all ranks of comm. Throws kolo::Error naming the rank and
// the file (a foreign file, an I/O error, a record that does not match the
// spec, a transform that threw on some rank).
BuildResult build_cache(Communicator& comm, const std::string& path, const CacheSpec& spec,
                        const Transform& transform, const BuildOptions& options = {});

struct OpenOptions {
  bool verify = true;  // check the CRC-32 of the whole file (one sequential read)
  // Expected spec fields; a cache that differs is refused as stale.
  std::optional<std::string> transform;
  std::optional<std::uint64_t> inputs;
};

// A memory map of a cache file. Records are 64-byte aligned views into the
// map: nothing is copied. The map is private: writing into it (a tensor
// viewing it modified in place) copies the page for this process and never
// changes the file. Movable, not copyable.
class Cache {
 public:
  static Cache open(const std::string& path, const OpenOptions& options = {});
  Cache() = default;
  Cache(Cache&& o) noexcept;
  Cache& operator=(Cache&& o) noexcept;
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;
  ~Cache();

  const std::string& path() const { return path_; }
  const CacheSpec& spec() const { return spec_; }
  std::uint64_t size() const { return spec_.num_samples; }
  const void* data(std::uint64_t i) const;  // record bytes (throws if i >= size())
  std::uint64_t bytes(std::uint64_t i) const;
  std::int64_t label(std::uint64_t i) const;
  // Records lie at a fixed stride (all the same length): record i at
  // data(0) + i·stride(); labels at label_data()[3·i]. 0 when they differ.
  std::uint64_t stride() const { return stride_; }
  const std::int64_t* label_data() const;

 private:
  void check_index(std::uint64_t i) const;
  std::string path_;
  CacheSpec spec_;
  const std::uint8_t* map_ = nullptr;
  std::uint64_t map_bytes_ = 0;
  std::uint64_t index_offset_ = 0;
  std::uint64_t stride_ = 0;
};

}  // namespace kolo::data
