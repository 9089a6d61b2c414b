// The cache file: header encoding, the checks that tell a usable cache from
// a truncated, corrupt or foreign file, and the read-only memory map.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "data_error.h"
#include "data_cache_format.h"

namespace kolo::data {

namespace detail {

namespace {

void put(std::string& s, std::size_t at, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s[at + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint64_t get(const std::uint8_t* p, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= std::uint64_t{p[at + static_cast<std::size_t>(i)]} << (8 * i);
  return v;
}

constexpr std::size_t kShapeAt = 56, kTransformAt = 120, kHeaderCrcAt = kHeaderBytes - 4;

bool valid_dtype(std::uint64_t d) { return d <= static_cast<std::uint64_t>(DType::U8); }

}  // namespace

std::uint32_t crc32_update(std::uint32_t crc, const void* p, std::uint64_t n) {
  auto* b = static_cast<const Bytef*>(p);
  uLong c = crc;
  while (n > 0) {  // zlib takes at most 4 GiB per call
    const auto chunk = static_cast<uInt>(std::min<std::uint64_t>(n, 1u << 30));
    c = crc32(c, b, chunk);
    b += chunk;
    n -= chunk;
  }
  return static_cast<std::uint32_t>(c);
}

std::uint64_t record_bytes(const CacheSpec& spec) {
  if (spec.shape.empty()) return 0;
  std::uint64_t n = dtype_size(spec.dtype);
  for (auto d : spec.shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::string describe(const CacheSpec& spec) {
  return fmt::format("[{}] {}", fmt::join(spec.shape, ", "), dtype_name(spec.dtype));
}

void check_spec(const CacheSpec& spec) {
  if (spec.transform.size() > kMaxTransform)
    fail("cache spec: the transform name has {} bytes, at most {} fit", spec.transform.size(),
                   kMaxTransform);
  if (spec.shape.size() > kMaxDims)
    fail("cache spec: shape {} has more than {} dimensions", describe(spec), kMaxDims);
  for (auto d : spec.shape)
    if (d < 0) fail("cache spec: shape {} has a negative dimension", describe(spec));
}

std::string encode_header(const Header& h) {
  std::string s(kHeaderBytes, '\0');
  std::memcpy(s.data(), kMagic, sizeof kMagic);
  put(s, 8, kVersion, 4);
  put(s, 12, kHeaderBytes, 4);
  put(s, 16, h.spec.num_samples, 8);
  put(s, 24, h.spec.inputs, 8);
  put(s, 32, h.index_offset, 8);
  put(s, 40, h.file_size, 8);
  put(s, 48, h.payload_crc, 4);
  put(s, 52, static_cast<std::uint64_t>(h.spec.dtype), 1);
  put(s, 53, h.spec.shape.size(), 1);
  put(s, 54, h.spec.transform.size(), 2);
  for (std::size_t i = 0; i < h.spec.shape.size(); ++i)
    put(s, kShapeAt + 8 * i, static_cast<std::uint64_t>(h.spec.shape[i]), 8);
  std::memcpy(s.data() + kTransformAt, h.spec.transform.data(), h.spec.transform.size());
  put(s, kHeaderCrcAt, crc32_update(0, s.data(), kHeaderCrcAt), 4);
  return s;
}

Inspection inspect(const std::uint8_t* p, std::uint64_t size, bool verify) {
  Inspection r;
  auto damaged = [&](std::string why) {
    r.health = Health::Damaged;
    r.problem = std::move(why);
    return r;
  };
  if (size < sizeof kMagic || std::memcmp(p, kMagic, sizeof kMagic) != 0) {
    r.health = Health::Foreign;
    r.problem = fmt::format("not a kolo cache (it does not start with \"KOLOCACH\"; {} bytes)", size);
    return r;
  }
  if (size < kHeaderBytes)
    return damaged(fmt::format("truncated: {} bytes, shorter than the {}-byte header", size, kHeaderBytes));
  if (get(p, kHeaderCrcAt, 4) != crc32_update(0, p, kHeaderCrcAt))
    return damaged("corrupt: the header's CRC-32 does not match");
  if (const auto v = get(p, 8, 4); v != kVersion)
    return damaged(fmt::format("format version {}; this kolo reads version {}", v, kVersion));
  Header& h = r.header;
  h.spec.num_samples = get(p, 16, 8);
  h.spec.inputs = get(p, 24, 8);
  h.index_offset = get(p, 32, 8);
  h.file_size = get(p, 40, 8);
  h.payload_crc = static_cast<std::uint32_t>(get(p, 48, 4));
  const auto dtype = get(p, 52, 1), ndim = get(p, 53, 1), tlen = get(p, 54, 2);
  if (!valid_dtype(dtype) || ndim > kMaxDims || tlen > kMaxTransform || get(p, 12, 4) != kHeaderBytes ||
      h.index_offset < kHeaderBytes || h.index_offset % kAlign != 0 ||
      h.spec.num_samples > (~std::uint64_t{0} - h.index_offset) / kIndexEntryBytes ||
      h.file_size != h.index_offset + kIndexEntryBytes * h.spec.num_samples)
    return damaged("corrupt: the header's fields are inconsistent");
  h.spec.dtype = static_cast<DType>(dtype);
  for (std::size_t i = 0; i < ndim; ++i)
    h.spec.shape.push_back(static_cast<std::int64_t>(get(p, kShapeAt + 8 * i, 8)));
  h.spec.transform.assign(reinterpret_cast<const char*>(p) + kTransformAt, tlen);
  if (size < h.file_size)
    return damaged(fmt::format("truncated: the header says {} bytes, the file has {}", h.file_size, size));
  if (size > h.file_size)
    return damaged(fmt::format("corrupt: the header says {} bytes, the file has {} (trailing data)",
                               h.file_size, size));
  if (verify && crc32_update(0, p + kHeaderBytes, size - kHeaderBytes) != h.payload_crc)
    return damaged("corrupt: the CRC-32 of its records and index does not match the header's");
  // Always (it is cheap): no index entry may point outside the records.
  const std::uint64_t want = record_bytes(h.spec);
  for (std::uint64_t i = 0; i < h.spec.num_samples; ++i) {
    const std::uint64_t off = get(p, h.index_offset + kIndexEntryBytes * i, 8);
    const std::uint64_t len = get(p, h.index_offset + kIndexEntryBytes * i + 8, 8);
    if (off < kHeaderBytes || off % kAlign != 0 || off > h.index_offset || len > h.index_offset - off ||
        (!h.spec.shape.empty() && len != want))
      return damaged(fmt::format("corrupt: index entry {} (offset {}, {} bytes) is out of place", i, off, len));
  }
  r.health = Health::Ok;
  return r;
}

std::string spec_difference(const CacheSpec& have, const CacheSpec& want) {
  if (have.transform != want.transform)
    return fmt::format("transform '{}' != '{}'", have.transform, want.transform);
  if (have.inputs != want.inputs)
    return fmt::format("inputs fingerprint {:016x} != {:016x}", have.inputs, want.inputs);
  if (have.num_samples != want.num_samples)
    return fmt::format("{} samples != {}", have.num_samples, want.num_samples);
  if (have.dtype != want.dtype || have.shape != want.shape)
    return fmt::format("records {} != {}", describe(have), describe(want));
  return "";
}

}  // namespace detail

// --- Cache: the read-only map ---------------------------------------------------

Cache Cache::open(const std::string& path, const OpenOptions& options) {
  using namespace detail;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open cache '{}': {}", path, errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("cannot stat cache '{}': {}", path, errno_text(e));
  }
  Cache c;
  c.path_ = path;
  c.map_bytes_ = static_cast<std::uint64_t>(st.st_size);
  if (c.map_bytes_ > 0) {
    // Private and writable: the pages are the page cache's (shared by every
    // rank on the host) until someone writes into a tensor viewing them;
    // that write then copies the page for this process instead of crashing
    // or changing the file.
    void* m = ::mmap(nullptr, c.map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail("cannot map cache '{}': {}", path, errno_text(e));
    }
    c.map_ = static_cast<const std::uint8_t*>(m);
  }
  ::close(fd);  // the map keeps the file
  const Inspection in = inspect(c.map_, c.map_bytes_, options.verify);
  if (in.health != Health::Ok) fail("cache '{}' is {}", path, in.problem);
  c.spec_ = in.header.spec;
  c.index_offset_ = in.header.index_offset;
  CacheSpec want = c.spec_;
  if (options.transform) want.transform = *options.transform;
  if (options.inputs) want.inputs = *options.inputs;
  if (auto diff = spec_difference(c.spec_, want); !diff.empty())
    fail("cache '{}' is stale: {} (rebuild it)", path, diff);
  // Fixed stride when every record has the same length (always so with a shape).
  const std::uint64_t n = c.size();
  if (n > 0) {
    const std::uint64_t len = c.bytes(0), stride = align_up(std::max<std::uint64_t>(len, 1));
    auto offset = [&](std::uint64_t i) {
      return static_cast<std::uint64_t>(static_cast<const std::uint8_t*>(c.data(i)) - c.map_);
    };
    const std::uint64_t base = offset(0);
    bool fixed = true;
    for (std::uint64_t i = 1; i < n && fixed; ++i)
      fixed = c.bytes(i) == len && offset(i) == base + i * stride;
    c.stride_ = fixed ? stride : 0;
  }
  return c;
}

Cache::Cache(Cache&& o) noexcept { *this = std::move(o); }

Cache& Cache::operator=(Cache&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(const_cast<std::uint8_t*>(map_), map_bytes_);
    path_ = std::move(o.path_);
    spec_ = std::move(o.spec_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    index_offset_ = o.index_offset_;
    stride_ = o.stride_;
  }
  return *this;
}

Cache::~Cache() {
  if (map_) ::munmap(const_cast<std::uint8_t*>(map_), map_bytes_);
}

void Cache::check_index(std::uint64_t i) const {
  if (i >= size()) fail("cache '{}': sample {} is out of range (it holds {})", path_, i, size());
}

const std::int64_t* Cache::label_data() const {
  return reinterpret_cast<const std::int64_t*>(map_ + index_offset_ + 16);
}

const void* Cache::data(std::uint64_t i) const {
  check_index(i);
  std::uint64_t off;
  std::memcpy(&off, map_ + index_offset_ + detail::kIndexEntryBytes * i, 8);
  return map_ + off;
}

std::uint64_t Cache::bytes(std::uint64_t i) const {
  check_index(i);
  std::uint64_t len;
  std::memcpy(&len, map_ + index_offset_ + detail::kIndexEntryBytes * i + 8, 8);
  return len;
}

std::int64_t Cache::label(std::uint64_t i) const {
  check_index(i);
  return label_data()[detail::kIndexEntryBytes / 8 * i];
}

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "Cache reads the index in place: a little-endian host is assumed");

}  // namespace kolo::data
