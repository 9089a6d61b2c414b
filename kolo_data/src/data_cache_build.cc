// build_cache: the collective that maps a transform over the samples, each
// rank its share, and has rank 0 write the cache (see kolo/data/cache.h).
//
// Protocol, identical on every rank, so that no rank waits alone:
//   1. allgather a digest of the spec: every rank must build the same cache;
//   2. rank 0 inspects the existing file and, if it must build, opens the
//      writer; it broadcasts the verdict (reuse / build / error + text);
//   3. rounds of size()·chunk samples: each rank transforms its block and
//      packs it ({u64 length, i64 label, bytes} per sample); an allgather of
//      {packed bytes, error length} per rank; if any rank failed, an
//      allgatherv of the error texts and every rank throws the first failing
//      rank's error; else an allgatherv of the blocks and rank 0 appends them
//      in sample order;
//   4. rank 0 commits and broadcasts the outcome.
// Rank 0's own I/O errors travel in the next step's status, so the others
// learn of them instead of waiting.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>

#include "data_error.h"
#include "data_cache_format.h"
#include "data_cache_writer.h"

namespace kolo::data {

namespace {

using namespace detail;
using Clock = std::chrono::steady_clock;

// Rank 0's verdict on an existing file.
struct Verdict {
  enum Kind : std::uint64_t { Reuse, Build, Refuse } kind = Build;
  std::string text;  // the reason to build, or the error
};

Verdict judge(const std::string& path, const CacheSpec& spec, bool force) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return {Verdict::Build, "no cache yet"};
    return {Verdict::Refuse, fmt::format("cannot open the cache '{}': {}", path, errno_text(errno))};
  }
  struct stat st {};
  ::fstat(fd, &st);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  void* m = size ? ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0) : nullptr;
  ::close(fd);
  if (m == MAP_FAILED) return {Verdict::Refuse, fmt::format("cannot map '{}': {}", path, errno_text(errno))};
  const Inspection in = inspect(static_cast<const std::uint8_t*>(m), size, /*verify=*/true);
  if (m) ::munmap(m, size);
  switch (in.health) {
    case Health::Foreign:
      return {Verdict::Refuse,
              fmt::format("'{}' exists and is {}; not overwriting it (remove it or choose another path)",
                          path, in.problem)};
    case Health::Damaged:
      return {Verdict::Build, in.problem};
    case Health::Missing:
    case Health::Ok:
      break;
  }
  if (auto diff = spec_difference(in.header.spec, spec); !diff.empty()) return {Verdict::Build, "stale: " + diff};
  if (force) return {Verdict::Build, "forced"};
  return {Verdict::Reuse, ""};
}

// Sends rank 0's (kind, text) to every rank.
void broadcast_verdict(Communicator& comm, Verdict& v) {
  std::uint64_t head[2] = {v.kind, v.text.size()};
  comm.broadcast(head, 2, DType::I64, 0);  // kolo carries u64 as i64 bits
  v.kind = static_cast<Verdict::Kind>(head[0]);
  v.text.resize(head[1]);
  if (head[1]) comm.broadcast(v.text.data(), head[1], DType::U8, 0);
}

std::uint64_t spec_digest(const CacheSpec& s) {
  InputHash h;
  h.number(s.num_samples).text(s.transform).number(s.inputs).number(static_cast<std::uint64_t>(s.dtype));
  for (auto d : s.shape) h.number(static_cast<std::uint64_t>(d));
  return h.number(s.shape.size()).value();
}

// A bar on rank 0, redrawn at most 4 times a second.
class Progress {
 public:
  Progress(bool on, std::string path, std::uint64_t total)
      : on_(on), path_(std::move(path)), total_(total), t0_(Clock::now()) {}
  void update(std::uint64_t done) {
    if (!on_) return;
    const auto now = Clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds(250)) return;
    last_ = now;
    const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    constexpr int kWidth = 24;
    std::string bar;
    for (int i = 0; i < kWidth; ++i) bar += i < static_cast<int>(frac * kWidth + 0.5) ? "\u2588" : "\u2591";
    std::printf("%spreprocess %s %s %3.0f%% %llu/%llu samples %.0f samples/s", drawn_ ? "\r" : "",
                path_.c_str(), bar.c_str(), frac * 100, static_cast<unsigned long long>(done),
                static_cast<unsigned long long>(total_), static_cast<double>(done) / seconds());
    std::fflush(stdout);
    drawn_ = true;
  }
  void end() {
    if (drawn_) std::printf("\n");
    drawn_ = false;
  }
  double seconds() const { return std::max(1e-9, std::chrono::duration<double>(Clock::now() - t0_).count()); }

 private:
  bool on_, drawn_ = false;
  std::string path_;
  std::uint64_t total_;
  Clock::time_point t0_, last_{};
};

void put64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  const auto at = out.size();
  out.resize(at + 8);
  std::memcpy(out.data() + at, &v, 8);
}
std::uint64_t get64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Transforms samples [begin, end) into `packed`; returns "" or the error.
std::string transform_block(const Transform& fn, const CacheSpec& spec, std::uint64_t begin,
                            std::uint64_t end, std::vector<std::uint8_t>& packed) {
  const std::uint64_t want = record_bytes(spec);
  Record r;
  for (std::uint64_t i = begin; i < end; ++i) {
    r.data.clear();
    r.label = 0;
    try {
      fn(i, r);
    } catch (const std::exception& e) {
      return fmt::format("the transform failed on sample {}: {}", i, e.what());
    }
    if (!spec.shape.empty() && r.data.size() != want)
      return fmt::format("the transform gave sample {} {} bytes; records of {} have {}", i, r.data.size(),
                         describe(spec), want);
    put64(packed, r.data.size());
    put64(packed, static_cast<std::uint64_t>(r.label));
    packed.insert(packed.end(), r.data.begin(), r.data.end());
  }
  return "";
}

// An error text without the "kolo rank R: " that fail_as put in front.
std::string unprefixed(const std::string& s) {
  const std::string p = rank_prefix();
  return s.rfind(p, 0) == 0 ? s.substr(p.size()) : s;
}

}  // namespace

BuildResult build_cache(Communicator& comm, const std::string& path, const CacheSpec& spec,
                        const Transform& transform, const BuildOptions& options) {
  check_spec(spec);
  const int rank = comm.rank(), size = comm.size();
  const std::size_t chunk = std::max<std::size_t>(options.chunk, 1);

  // 1. Same spec everywhere.
  std::vector<std::uint64_t> digests(static_cast<std::size_t>(size));
  const std::uint64_t digest = spec_digest(spec);
  comm.allgather(&digest, digests.data(), 1, DType::I64);
  for (int r = 0; r < size; ++r)
    if (digests[static_cast<std::size_t>(r)] != digests[0])
      fail("build_cache('{}'): rank {}'s cache spec differs from rank 0's (every rank must pass the "
                     "same samples, transform, inputs, dtype and shape)",
                     path, r);

  // 2. Reuse, build or refuse.
  Verdict v;
  std::unique_ptr<CacheWriter> writer;
  if (rank == 0) {
    v = judge(path, spec, options.force);
    if (v.kind == Verdict::Build) {
      try {
        writer = std::make_unique<CacheWriter>(path, spec);
      } catch (const std::exception& e) {
        v = {Verdict::Refuse, e.what()};
      }
    }
  }
  broadcast_verdict(comm, v);
  BuildResult result;
  if (v.kind == Verdict::Refuse) {
    if (rank == 0) fail("{}", unprefixed(v.text));
    fail("build_cache: rank 0 refused: {}", unprefixed(v.text));
  }
  if (v.kind == Verdict::Reuse) {
    if (rank == 0 && options.progress) std::printf("preprocess %s: reusing the cache (up to date)\n", path.c_str());
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) result.bytes = static_cast<std::uint64_t>(st.st_size);
    return result;
  }
  if (rank == 0 && options.progress) {
    std::printf("preprocess %s: building (%s), %llu samples on %d rank%s\n", path.c_str(), v.text.c_str(),
                static_cast<unsigned long long>(spec.num_samples), size, size == 1 ? "" : "s");
    std::fflush(stdout);
  }
  result.built = true;
  result.reason = v.text;

  // 3. Rounds.
  Progress bar(rank == 0 && options.progress, path, spec.num_samples);
  const std::uint64_t n = spec.num_samples, round = static_cast<std::uint64_t>(size) * chunk;
  std::string rank0_error;  // rank 0's write error, reported in the next exchange
  std::vector<std::uint8_t> mine, all;
  std::vector<std::uint64_t> status(2 * static_cast<std::size_t>(size));
  // Every rank's {bytes, error length}; on any error, every rank learns the
  // first failing rank's text (kolorun shows whichever rank exits first).
  auto exchange = [&](std::uint64_t bytes, const std::string& error) {
    const std::uint64_t s[2] = {bytes, error.size()};
    comm.allgather(s, status.data(), 2, DType::I64);
    std::vector<std::size_t> lengths(static_cast<std::size_t>(size));
    std::size_t total = 0;
    for (std::size_t r = 0; r < lengths.size(); ++r) total += lengths[r] = status[2 * r + 1];
    if (total == 0) return;
    std::string texts(total, '\0');
    comm.allgatherv(error.data(), texts.data(), lengths, DType::U8);
    bar.end();
    writer.reset();  // no file left behind
    std::size_t first = 0, at = 0;
    while (lengths[first] == 0) at += lengths[first++];
    fail("build of the cache '{}' failed on rank {}: {}", path, first,
                   unprefixed(texts.substr(at, lengths[first])));
  };
  for (std::uint64_t start = 0; start < n; start += round) {
    const std::uint64_t begin = std::min(n, start + static_cast<std::uint64_t>(rank) * chunk);
    const std::uint64_t end = std::min(n, begin + chunk);
    mine.clear();
    std::string error = transform_block(transform, spec, begin, end, mine);
    if (rank == 0 && error.empty()) error = rank0_error;
    exchange(mine.size(), error);
    std::vector<std::size_t> counts(static_cast<std::size_t>(size));
    std::uint64_t total = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) total += counts[r] = status[2 * r];
    all.resize(total);
    if (total) comm.allgatherv(mine.data(), all.data(), counts, DType::U8);
    if (rank == 0) {
      try {
        for (std::uint64_t at = 0; at < total;) {
          const std::uint8_t* rec = all.data() + at;  // {length, label, bytes}
          const std::uint64_t len = get64(rec);
          writer->append(rec + 16, len, static_cast<std::int64_t>(get64(rec + 8)));
          at += 16 + len;
        }
      } catch (const std::exception& e) {
        rank0_error = e.what();
      }
      bar.update(std::min(n, start + round));
    }
  }

  // 4. Commit on rank 0; everyone learns the outcome.
  std::string error = rank0_error;
  if (rank == 0 && error.empty()) {
    try {
      result.bytes = writer->commit();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  exchange(result.bytes, error);
  result.bytes = status[0];
  result.seconds = bar.seconds();
  bar.end();
  if (rank == 0 && options.progress) {
    std::printf("preprocess %s: %llu samples, %.1f MB in %.1f s (%.0f samples/s)\n", path.c_str(),
                static_cast<unsigned long long>(n), static_cast<double>(result.bytes) / 1e6, result.seconds,
                static_cast<double>(n) / result.seconds);
    std::fflush(stdout);
  }
  return result;
}

}  // namespace kolo::data
