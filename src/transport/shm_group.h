// Shared memory between the ranks of one host: one segment per communicator,
// holding a flag line, the fingerprints of its last two calls and three
// chunk-sized slots per rank.
//
// Synchronisation is by epochs. Every step of a shared-memory collective is:
// write into my slot of the new epoch, publish the epoch, wait until every rank
// has published it, then read other ranks' slots. A slot is reused three epochs
// later, so data written at epoch e may be read during epochs e and e+1: the
// owner rewrites it only after every rank has published e+2, i.e. after every
// rank has finished reading during e+1. That rule lets the algorithms overlap
// one chunk's reduction with the previous chunk's copy-out at one
// synchronisation per chunk.
//
// The segment is unlinked as soon as every rank has mapped it, so nothing is
// left in /dev/shm whatever happens to the processes afterwards.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/fingerprint.h"
#include "rendezvous/store.h"
#include "transport/members.h"

namespace kolo::transport {

class ShmGroup {
 public:
  static constexpr int kSlots = 3;

  // `rank` and `size` are within the group; `members` maps them to the
  // job's ranks for messages (a sub-group has its own store prefix).
  ShmGroup(rdv::StoreClient& store, const std::string& prefix, const std::string& job_id, int rank,
           int size, Members members = {});
  // Marks this rank as gone for the peers: one still waiting on it fails at
  // once, even though this process lives on (it may host the store its peers
  // still need: rendezvous/hosted_store.h), instead of at its timeout.
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Bytes in one slot.
  std::size_t chunk_bytes() const { return chunk_; }

  // The next epoch number; each synchronisation step takes one.
  std::uint64_t next_epoch() { return ++epoch_; }
  char* slot(int rank, std::uint64_t epoch) const {
    return slots_ + (static_cast<std::size_t>(rank) * kSlots + epoch % kSlots) * chunk_;
  }
  // Starts a collective: its fingerprint is compared with every rank's at the
  // collective's first wait_all (every shm collective synchronises at least once).
  void begin(const Fingerprint& fp);
  // Tells every rank waiting on this one that it failed (they fail at once,
  // with `reason` in their error: it reaches them without the store, which
  // may have gone with the rank that hosted it).
  void abort(const std::string& reason);
  // Marks this rank as having written its slot for epoch e.
  void publish(std::uint64_t e);
  // Waits until every rank has published e; fails naming the rank that died
  // or did not arrive in time.
  void wait_all(std::uint64_t e, const char* what);
  // How many of the job's processes share this machine's cores (by default
  // the group's size): beyond the cores this process may use, waits barely
  // spin, since a spinning rank then takes the core a peer needs.
  // Emulated hosts (and containers) put several groups on one machine.
  void set_cpu_sharers(int n);
  // Fails (IoError) if a peer has aborted or died: for a rank that waits on
  // something else (a TCP transfer) while its host's ranks may fail.
  void check_peers(const char* what);
  // publish + wait_all of a fresh epoch.
  // Scratch for the list of source pointers a reduction takes (size() entries).
  const void** sources() { return sources_.data(); }

  std::uint64_t sync(const char* what) {
    std::uint64_t e = next_epoch();
    publish(e);
    wait_all(e, what);
    return e;
  }

  // Busy-wait iterations before a waiting rank sleeps, in a collective that
  // blocks its caller and in one that overlaps its caller's work (core/overlap.h),
  // and how many times it then yields its core before the sleep.
  struct Spins {
    int blocking, overlapped, yields;
  };

 private:
  // One per rank, on its own pair of cache lines. The low half of `epoch` is
  // also the futex word sleepers wait on; `sleepers` tells the publisher
  // whether a wake-up call is needed at all.
  // Fingerprints come in two, by collective parity: a rank can be at most one
  // collective ahead of the slowest one still comparing. Only their 64-bit
  // digests share the cache line with `epoch`, which every collective
  // transfers anyway, so the check adds no cache-line transfer to a
  // collective; the full fingerprints live apart (Calls) and are read by
  // peers only to word an error or a stall warning.
  struct alignas(128) Flag {
    std::atomic<std::uint64_t> epoch;
    std::atomic<std::int32_t> sleepers;
    std::atomic<std::int32_t> pid;
    std::atomic<std::int32_t> aborted;  // kAborted, kLeft, else 0
    std::atomic<std::uint64_t> digest[2];
  };
  struct alignas(128) Calls {
    Fingerprint fp[2];
    char reason[1024];  // why this rank aborted, written before `aborted` is set
  };
  static constexpr std::int32_t kAborted = 1;  // failed: `reason` says why
  static constexpr std::int32_t kLeft = 2;     // destroyed its group (closed its communicator)
  [[noreturn]] void fail_aborted(int peer, const char* what);
  void check_fingerprints();
  void wait_for(int peer, std::uint64_t e, const char* what);
  // Whether the peer's process has exited, also when its parent has not
  // reaped it yet (kolorun keeps exited ranks as zombies until the job ends,
  // and kill(pid, 0) succeeds on a zombie): polls a pidfd of the peer.
  bool peer_exited(int peer, int pid);

  int rank_;
  int size_;
  Members members_;
  std::size_t chunk_;
  std::size_t bytes_ = 0;
  void* base_ = nullptr;
  Flag* flags_ = nullptr;
  Calls* calls_ = nullptr;
  char* slots_ = nullptr;
  std::uint64_t epoch_ = 0;
  std::int64_t timeout_ms_;
  std::int64_t stall_warn_ms_;
  Spins spins_;
  Fingerprint current_, previous_;
  std::uint64_t current_digest_ = 0;
  bool unchecked_ = false;  // current_ not yet compared with the other ranks'
  std::vector<const void*> sources_;
  std::vector<int> pidfds_;  // per peer: -1 not opened yet, -2 no pidfd (use kill)
};

}  // namespace kolo::transport
