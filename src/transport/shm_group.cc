#include "transport/shm_group.h"

#include <fcntl.h>
#include <immintrin.h>
#include <sched.h>
#include <signal.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/overlap.h"

namespace kolo::transport {

namespace {

constexpr std::size_t kPage = 4096;

std::size_t round_up(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

// The futex word is the low 32 bits of the 64-bit epoch (x86-64 is little-endian).
std::uint32_t* futex_word(std::atomic<std::uint64_t>& epoch) {
  return reinterpret_cast<std::uint32_t*>(&epoch);
}

std::string random_suffix() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

// The cores this process may run on (a cpuset under Slurm or taskset).
int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

// How long a waiting rank spins before it sleeps, when `sharers` ranks of
// the job share this machine: long while they fit the cores (a
// peer that runs side by side arrives within microseconds, and a futex
// sleep would cost more), barely at all beyond, where a spinning rank takes
// the core a peer needs. An asynchronous collective barely spins either: it
// runs on the engine thread while its caller computes (a backward pass), so
// the ranks' threads already outnumber the cores and a spin takes CPU from
// the compute of this rank or its peer (2-rank MLP training on 2 cores,
// bench/results/shm-spins-overlap-np2-vm-2026-11-24.md). KOLO_SHM_SPINS
// overrides both (bench/shm_spins.py measures the trade-off).
//
// Between the spin and the sleep a rank yields its core, but only where the
// ranks outnumber the machine's cores, so that a peer waiting for this very
// core runs at once (4 ranks on 2 cores: an 8-byte allreduce 6 us instead of
// 15 us through futex wake-ups). Elsewhere a yield can only hand the core to
// another program's thread, and then for the rest of its scheduler slice:
// on a loaded core the rank saw its peer's arrival 4-12 ms late, and left
// the collective that much after it (bench/results/shm-yield-load-np2-vm-2026-11-30.md).
// The machine's cores, not this process's: mpirun binds each rank to a core
// of its own, where the peers are never on this rank's core.
ShmGroup::Spins spins_for(int sharers) {
  const int yields = sharers > static_cast<int>(std::thread::hardware_concurrency()) ? 64 : 0;
  const std::int64_t forced = config::shm_spins();
  if (forced >= 0) {
    const int n = static_cast<int>(std::min<std::int64_t>(forced, 1 << 30));
    return {n, n, yields};
  }
  constexpr int kFew = 50;
  return {sharers <= usable_cores() ? 20000 : kFew, kFew, yields};
}

}  // namespace

ShmGroup::ShmGroup(rdv::StoreClient& store, const std::string& prefix, const std::string& job_id,
                   int rank, int size, Members members)
    : rank_(rank), size_(size), members_(std::move(members)), timeout_ms_(config::timeout_ms()),
      stall_warn_ms_(config::stall_warn_ms()),
      spins_(spins_for(size)),
      sources_(size), pidfds_(size, -1) {
  chunk_ = round_up(static_cast<std::size_t>(std::max<std::int64_t>(config::shm_chunk_bytes(), 4096)), kPage);
  const std::size_t flags_bytes = round_up(sizeof(Flag) * size, kPage);
  const std::size_t calls_bytes = round_up(sizeof(Calls) * size, kPage);
  bytes_ = flags_bytes + calls_bytes + static_cast<std::size_t>(size) * kSlots * chunk_;
  const auto rdv_timeout = std::chrono::milliseconds(config::rendezvous_timeout_ms());

  // The name carries the job id so that kolorun can sweep a crashed job's
  // segment; the random part keeps concurrent jobs and communicators apart.
  std::string name;
  int fd = -1;
  if (rank == 0) {
    name = fmt::format("/kolo-{}-{}-{}", job_id.empty() ? "job" : job_id, getpid(), random_suffix());
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) fail("shm_open({}): {}", name, errno_text(errno));
    if (ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
      int err = errno;
      shm_unlink(name.c_str());
      fail("cannot size shared memory segment {} to {} bytes: {}", name, bytes_, errno_text(err));
    }
    store.set(prefix + "/shm/name", name);
  } else {
    name = store.get(prefix + "/shm/name", rdv_timeout);
    fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) fail("cannot open rank 0's shared memory segment {}: {}", name, errno_text(errno));
  }
  base_ = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int map_err = errno;
  close(fd);
  if (base_ == MAP_FAILED) {
    if (rank == 0) shm_unlink(name.c_str());
    fail("mmap of {} bytes of shared memory: {}", bytes_, errno_text(map_err));
  }
  flags_ = static_cast<Flag*>(base_);
  calls_ = reinterpret_cast<Calls*>(static_cast<char*>(base_) + flags_bytes);
  slots_ = static_cast<char*>(base_) + flags_bytes + calls_bytes;
  flags_[rank].pid.store(getpid(), std::memory_order_relaxed);

  // Once every rank has mapped the segment, its name is no longer needed.
  store.set(fmt::format("{}/shm/mapped/{}", prefix, rank), "1");
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(fmt::format("{}/shm/mapped/{}", prefix, r));
    try {
      store.wait(keys, rdv_timeout);
    } catch (...) {
      shm_unlink(name.c_str());
      throw;
    }
    shm_unlink(name.c_str());
  }
}

ShmGroup::~ShmGroup() {
  // Not from a forked child's copy: the parent still uses this rank's flag.
  if (flags_ != nullptr && flags_[rank_].pid.load(std::memory_order_relaxed) == getpid()) {
    std::int32_t none = 0;
    flags_[rank_].aborted.compare_exchange_strong(none, kLeft, std::memory_order_seq_cst);
    syscall(SYS_futex, futex_word(flags_[rank_].epoch), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
  }
  if (base_ != nullptr && base_ != MAP_FAILED) munmap(base_, bytes_);
  for (int fd : pidfds_)
    if (fd >= 0) close(fd);
}

bool ShmGroup::peer_exited(int peer, int pid) {
  int& fd = pidfds_[peer];
  if (fd == -1) {
    fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) {
      if (errno == ESRCH) return true;
      fd = -2;  // no pidfds here (kernel < 5.3, seccomp): kill() misses zombies
    }
  }
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};  // readable once the process has exited
    return poll(&p, 1, 0) > 0;
  }
  return kill(pid, 0) != 0 && errno == ESRCH;
}

void ShmGroup::abort(const std::string& reason) {
  Flag& f = flags_[rank_];
  char* text = calls_[rank_].reason;
  const std::size_t n = std::min(reason.size(), sizeof calls_[rank_].reason - 1);
  std::memcpy(text, reason.data(), n);
  text[n] = '\0';
  f.aborted.store(kAborted, std::memory_order_seq_cst);
  syscall(SYS_futex, futex_word(f.epoch), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void ShmGroup::publish(std::uint64_t e) {
  Flag& f = flags_[rank_];
  f.epoch.store(e, std::memory_order_seq_cst);
  // seq_cst store then load: a sleeper that registered before our store is seen.
  if (f.sleepers.load(std::memory_order_seq_cst) > 0)
    syscall(SYS_futex, futex_word(f.epoch), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void ShmGroup::begin(const Fingerprint& fp) {
  previous_ = current_;
  current_ = fp;
  current_digest_ = fp.digest();
  // Both published by the next publish()'s seq_cst store.
  calls_[rank_].fp[fp.seq % 2] = fp;
  flags_[rank_].digest[fp.seq % 2].store(current_digest_, std::memory_order_relaxed);
  unchecked_ = true;
}

void ShmGroup::wait_all(std::uint64_t e, const char* what) {
  for (int q = 0; q < size_; ++q)
    if (flags_[q].epoch.load(std::memory_order_acquire) < e) wait_for(q, e, what);
  if (unchecked_) check_fingerprints();
}

void ShmGroup::check_fingerprints() {
  unchecked_ = false;
  const unsigned parity = current_.seq % 2;
  for (int q = 0; q < size_; ++q)
    if (flags_[q].digest[parity].load(std::memory_order_relaxed) != current_digest_)
      fail_mismatch(current_, previous_, members_.label(rank_), calls_[q].fp[parity], members_.label(q));
}

void ShmGroup::fail_aborted(int peer, const char* what) {
  if (flags_[peer].aborted.load(std::memory_order_acquire) == kLeft)
    fail_io("{}: {} has closed this communicator (its program shut kolo down or is ending) while this "
            "rank waited for it", what, members_.name(peer));
  std::string reason(calls_[peer].reason, strnlen(calls_[peer].reason, sizeof calls_[peer].reason));
  fail_io("{}: {} failed and left the collective{}{}", what, members_.name(peer), reason.empty() ? "" : ": ",
          reason);
}

void ShmGroup::set_cpu_sharers(int n) { spins_ = spins_for(n); }

void ShmGroup::check_peers(const char* what) {
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    if (flags_[q].aborted.load(std::memory_order_acquire)) fail_aborted(q, what);
    const pid_t pid = flags_[q].pid.load(std::memory_order_relaxed);
    if (pid > 0 && peer_exited(q, pid)) fail_io("{}: {} (pid {}) died", what, members_.name(q), pid);
  }
}

// Spin briefly (the peer is usually well under a microsecond behind), yield
// where ranks outnumber cores, then sleep on the peer's futex word, waking
// every 5 ms to check the deadline and that the peer is still alive.
void ShmGroup::wait_for(int peer, std::uint64_t e, const char* what) {
  Flag& f = flags_[peer];
  // A peer publishes an epoch before it aborts, leaves or exits: seen after
  // an older epoch, those may come from a peer that finished this step and
  // went on (closed its communicator right after its last collective), so
  // the epoch is read again before they count as a failure.
  auto published = [&] { return f.epoch.load(std::memory_order_acquire) >= e; };
  auto check_aborted = [&] {
    if (f.aborted.load(std::memory_order_acquire) && !published()) fail_aborted(peer, what);
    // Aborted from another thread (a communicator closed with a named
    // operation still waiting for its peers: comm/named_channel.h).
    if (flags_[rank_].aborted.load(std::memory_order_relaxed) == kAborted)
      fail_io("{}: this rank aborted the collective while it waited for {}", what, members_.name(peer));
  };
  const int spins = overlaps_caller ? spins_.overlapped : spins_.blocking;
  for (int i = 0; i < spins; ++i) {
    if (published()) return;
    if ((i & 255) == 0) check_aborted();
    _mm_pause();
  }
  // Give the core to a peer that may be waiting for it (spins_for: only where
  // ranks outnumber cores) before paying for a futex sleep and wake-up.
  for (int i = 0; i < spins_.yields; ++i) {
    if (f.epoch.load(std::memory_order_acquire) >= e) return;
    sched_yield();
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto warn_at = start + std::chrono::milliseconds(stall_warn_ms_);
  const timespec tick{0, 5 * 1000 * 1000};
  for (;;) {
    std::uint64_t seen = f.epoch.load(std::memory_order_acquire);
    if (seen >= e) return;
    f.sleepers.fetch_add(1, std::memory_order_seq_cst);
    seen = f.epoch.load(std::memory_order_seq_cst);
    if (seen < e)
      syscall(SYS_futex, futex_word(f.epoch), FUTEX_WAIT, static_cast<std::uint32_t>(seen), &tick,
              nullptr, 0);
    f.sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (published()) return;
    check_aborted();

    pid_t pid = f.pid.load(std::memory_order_relaxed);
    if (pid > 0 && peer_exited(peer, pid) && !published())
      fail_io("{}: {} (pid {}) died", what, members_.name(peer), pid);
    const auto now = Clock::now();
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
    if (now >= warn_at) {
      warn_at = now + std::chrono::milliseconds(stall_warn_ms_);
      const Fingerprint& a = calls_[peer].fp[0];
      const Fingerprint& b = calls_[peer].fp[1];
      const Fingerprint& theirs = a.seq > b.seq ? a : b;
      log(LogLevel::Warn, "stall: collective #{} {} ({}) has waited {} ms for {}, which is at collective #{} {}",
          current_.seq, current_.call(), what, waited, members_.name(peer), theirs.seq, theirs.seq ? theirs.call() : "(none yet)");
    }
    if (timeout_ms_ > 0 && waited > timeout_ms_)
      fail_timeout("{}: timed out after {} ms waiting for {}", what, waited, members_.name(peer));
  }
}

}  // namespace kolo::transport
