// What a rank says it is doing at each position of the collective stream.
// Ranks compare fingerprints at the first synchronisation of every collective
// (shared memory: in the flag line; TCP: a header before the first bytes to
// each peer), so ranks calling different collectives get an error that shows
// both calls instead of a hang or garbage.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kolo/kolo.h"

namespace kolo {

// Alltoallv's count is 0: its ranks' counts differ by design and are checked
// by an exchange of their own (Communicator::alltoallv).
enum class Kind : std::uint8_t { Allreduce, Broadcast, Allgather, Allgatherv, ReduceScatter, Alltoall, Alltoallv, Barrier };
// "allreduce", "reduce_scatter", ...: errors and the timeline name collectives so.
const char* kind_name(Kind k);

// The data planes that move CUDA memory (transport/gpu.h), by the code a
// fingerprint carries. One table names them all (plane_name): what a
// plane's name() and the mismatch error say cannot drift apart.
enum class PlaneCode : std::uint8_t { None = 0, Host = 1, Ipc = 2, Nccl = 3 };
// "host", "ipc", "nccl"; "" for None.
const char* plane_name(PlaneCode code);

// Plain bytes: it travels through shared memory and sockets as is.
struct Fingerprint {
  std::uint64_t seq = 0;    // position in this communicator's stream, from 1
  std::uint64_t count = 0;  // elements (allgatherv: the total)
  std::uint64_t extra = 0;  // allgatherv: a hash of the per-rank counts; others: of the caller's shape
  Kind kind = Kind::Barrier;
  DType dtype = DType::U8;
  Op op = Op::Sum;
  Place::Kind place = Place::Kind::Host;  // where the buffers live (host or CUDA memory)
  std::int32_t root = -1;
  std::uint32_t magic = kMagic;
  // CUDA memory: the data plane that moves it, which every rank must run
  // alike — a rank that could not load NCCL serves with the host plane.
  PlaneCode plane = PlaneCode::None;

  static constexpr std::uint32_t kMagic = 0x6b6f6670;  // "kofp"
  bool operator==(const Fingerprint&) const = default;
  // A 64-bit hash of every field: equal fingerprints have equal digests, and
  // different ones differ but with probability 2^-64 (shared memory compares
  // digests, then reads the full fingerprints only to word the error).
  std::uint64_t digest() const;
  // e.g. "allreduce(f32, 1000, sum)" or "broadcast(f32, 1000, root=0)"; with
  // shape, "allreduce(f32, 1000, sum, shape hash 1a2b3c4d)"; on CUDA memory,
  // "allreduce(f32, 1000, sum) on cuda via ipc".
  std::string call(bool shape = false) const;
};
static_assert(sizeof(Fingerprint) == 40);

Fingerprint fingerprint(Kind k, DType t, std::size_t count, Op op = Op::Sum, int root = -1);
Fingerprint fingerprint_v(DType t, std::span<const std::size_t> counts);
// fp of a call whose buffers live at `place` (host: unchanged), moved by
// the data plane `plane` (CUDA memory).
Fingerprint on(Fingerprint fp, const Place& place, PlaneCode plane = PlaneCode::None);
// fp checked with the caller's tensor shape as well (none: unchanged).
Fingerprint with_shape(Fingerprint fp, std::span<const std::int64_t> shape);

// Throws the mismatch error: "collective #57: rank 1 called allreduce(f32,
// 1000, sum) while rank 0 (this rank) called broadcast(f32, 1000, root=0)".
// `previous` is this rank's collective before `mine`: a peer still at that
// position is compared with it (this rank went on because its part of the
// previous collective needed nothing from that peer).
// `me` and `them` name the two ranks ("rank 1", or in a subgroup "rank 1 (world rank 3)").
[[noreturn]] void fail_mismatch(const Fingerprint& mine, const Fingerprint& previous, const std::string& me,
                                const Fingerprint& theirs, const std::string& them);

}  // namespace kolo
