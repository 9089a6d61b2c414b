#include "reducer/autotune.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "reducer/layout.h"

namespace kolo::fusion {

namespace {
// The grid: 256 KiB, 1, 4, 16 and 64 MiB (Horovod's own search range ends
// at 64 MiB; below 256 KiB a bucket's fixed cost dominates on every
// transport kolo has).
constexpr std::size_t kGridFirst = 256u << 10, kGridLast = 64u << 20, kGridStep = 4;
// Another candidate replaces the baseline only when faster by more than this.
constexpr double kMargin = 0.02;
}  // namespace

std::unique_ptr<Autotune> Autotune::make(const std::vector<ReducerEntry>& entries, const ReducerOptions& o,
                                         int rank) {
  if (!config::autotune()) return nullptr;
  if (config::fusion_threshold() >= 0) {
    if (rank == 0)
      log(LogLevel::Warn, "{}: KOLO_AUTOTUNE is on, but KOLO_FUSION_THRESHOLD (or HOROVOD_FUSION_THRESHOLD) "
                          "is set: the bucket cap stays {} bytes",
          o.what, o.bucket_bytes);
    return nullptr;
  }
  const std::int64_t warmup = config::autotune_warmup_steps(), steps = config::autotune_steps();
  if (warmup < 0 || warmup > 1000000)
    fail("KOLO_AUTOTUNE_WARMUP_STEPS is {}; it must be between 0 and 1000000", warmup);
  if (steps < 1 || steps > 1000000) fail("KOLO_AUTOTUNE_STEPS is {}; it must be between 1 and 1000000", steps);
  // Distinct layouts only, the baseline's first — judged in registration
  // order: the readiness rebuild after the first step may reorder the
  // entries, which can merge or split a pair of these layouts (a candidate
  // then repeats one, or one goes untried); the caps stay a fair grid.
  const std::vector<std::size_t> order = registration_order(entries.size());
  std::vector<std::size_t> caps;
  std::vector<std::vector<std::vector<std::size_t>>> layouts;
  auto consider = [&](std::size_t cap) {
    ReducerOptions c = o;
    c.bucket_bytes = cap;
    auto l = plan_buckets(entries, order, c);
    if (std::find(layouts.begin(), layouts.end(), l) != layouts.end()) return;
    layouts.push_back(std::move(l));
    caps.push_back(cap);
  };
  consider(o.bucket_bytes);
  for (std::size_t cap = kGridFirst; cap <= kGridLast; cap *= kGridStep) consider(cap);
  if (caps.size() < 2) {
    if (rank == 0)
      log(LogLevel::Info, "{}: autotune: every bucket cap gives these gradients one layout; nothing to tune",
          o.what);
    return nullptr;
  }
  const std::string path = config::autotune_log();
  if (o.tune_after_steps < 0) fail("{}: tune_after_steps is {}; it must be >= 0", o.what, o.tune_after_steps);
  return std::unique_ptr<Autotune>(new Autotune(std::move(caps), o.first_bucket_bytes,
                                                static_cast<int>(warmup) + o.tune_after_steps,
                                                static_cast<int>(steps), path, rank == 0));
}

Autotune::Autotune(std::vector<std::size_t> caps, std::size_t first_bucket_bytes, int warmup, int steps,
                   std::string log_path, bool rank0)
    : caps_(std::move(caps)), first_bytes_(first_bucket_bytes), warmup_(warmup), steps_(steps),
      log_path_(std::move(log_path)), rank0_(rank0) {
  if (rank0_ && !log_path_.empty()) {
    log_ = std::fopen(log_path_.c_str(), "w");
    if (!log_) fail("KOLO_AUTOTUNE_LOG={}: cannot open it for writing: {}", log_path_, std::strerror(errno));
    std::fputs("kind,bucket_bytes,first_bucket_bytes,buckets,steps,median_step_ms\n", log_);
    std::fflush(log_);
  }
  restart();
}

Autotune::~Autotune() {
  if (log_) std::fclose(log_);
}

void Autotune::restart() {
  scores_.clear();
  buckets_.clear();
  samples_.clear();
  current_ = chosen_ = 0;
  // The first step has nothing before it to be timed from: never timed.
  skip_ = std::max(warmup_, 1);
  done_ = false;
}

bool Autotune::step(double seconds) {
  if (done_) return false;
  if (skip_ > 0 || seconds < 0) {
    skip_ = std::max(skip_ - 1, 0);
    return false;
  }
  samples_.push_back(seconds);
  return samples_.size() >= static_cast<std::size_t>(steps_);
}

double Autotune::score() const {
  std::vector<double> s = samples_;
  std::sort(s.begin(), s.end());
  const std::size_t n = s.size();
  return n == 0 ? 0.0 : n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

void Autotune::scored(double agreed, std::size_t buckets) {
  scores_.push_back(agreed);
  buckets_.push_back(buckets);
  log_line("sample", current_, buckets, agreed);
  samples_.clear();
  skip_ = 1;  // the step that changes the layout
  if (++current_ < caps_.size()) return;
  std::size_t best = 0;
  for (std::size_t k = 1; k < scores_.size(); ++k)
    if (scores_[k] < scores_[best]) best = k;
  chosen_ = scores_[best] < scores_[0] * (1 - kMargin) ? best : 0;
  done_ = true;
  log_line("chosen", chosen_, buckets_[chosen_], scores_[chosen_]);
  if (rank0_)
    log(LogLevel::Info, "autotune chose a bucket cap of {} bytes ({} buckets, median step {:.3f} ms)",
                  caps_[chosen_], buckets_[chosen_], scores_[chosen_] * 1e3);
}

void Autotune::log_line(const char* kind, std::size_t k, std::size_t buckets, double score) {
  if (!log_) return;
  const std::size_t cap = caps_[k];
  if (std::fprintf(log_, "%s,%zu,%zu,%zu,%d,%.3f\n", kind, cap, std::min(first_bytes_, cap), buckets, steps_,
                   score * 1e3) < 0 ||
      std::fflush(log_) != 0)
    fail("KOLO_AUTOTUNE_LOG={}: writing failed: {}", log_path_, std::strerror(errno));
}

}  // namespace kolo::fusion
