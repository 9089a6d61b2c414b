#include "core/fingerprint.h"

#include "core/error.h"
#include "core/rejected.h"

namespace kolo {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Allreduce: return "allreduce";
    case Kind::Broadcast: return "broadcast";
    case Kind::Allgather: return "allgather";
    case Kind::Allgatherv: return "allgatherv";
    case Kind::ReduceScatter: return "reduce_scatter";
    case Kind::Alltoall: return "alltoall";
    case Kind::Alltoallv: return "alltoallv";
    case Kind::Barrier: return "barrier";
  }
  return "?";
}

const char* plane_name(PlaneCode code) {
  switch (code) {
    case PlaneCode::None: return "";
    case PlaneCode::Host: return "host";
    case PlaneCode::Ipc: return "ipc";
    case PlaneCode::Nccl: return "nccl";
  }
  return "?";
}

std::string Fingerprint::call(bool shape) const {
  if (magic != kMagic) return "something that is not a kolo collective";
  if (place != Place::Kind::Host) {
    Fingerprint host = *this;
    host.place = Place::Kind::Host;
    host.plane = PlaneCode::None;
    std::string text = host.call(shape) + " on cuda";
    if (plane != PlaneCode::None) text += fmt::format(" via {}", plane_name(plane));
    return text;
  }
  if (shape && kind != Kind::Allgatherv) {
    std::string text = call();
    return text.insert(text.size() - 1, fmt::format(", shape hash {:08x}", extra >> 32));
  }
  switch (kind) {
    case Kind::Barrier: return "barrier()";
    case Kind::Broadcast: return fmt::format("broadcast({}, {}, root={})", dtype_name(dtype), count, root);
    case Kind::Allreduce:
    case Kind::ReduceScatter:
      return fmt::format("{}({}, {}, {})", kind_name(kind), dtype_name(dtype), count, op_name(op));
    case Kind::Alltoallv: return fmt::format("alltoallv({})", dtype_name(dtype));
    case Kind::Allgatherv:
      return fmt::format("allgatherv({}, {} in total, counts hash {:016x})", dtype_name(dtype), count, extra);
    default: return fmt::format("{}({}, {})", kind_name(kind), dtype_name(dtype), count);
  }
}

namespace {
// splitmix64's finaliser: every input bit reaches every output bit.
std::uint64_t mix(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

std::uint64_t Fingerprint::digest() const {
  const std::uint64_t small = static_cast<std::uint64_t>(kind) | static_cast<std::uint64_t>(dtype) << 8 |
                              static_cast<std::uint64_t>(op) << 16 |
                              static_cast<std::uint64_t>(place) << 24 |
                              static_cast<std::uint64_t>(static_cast<std::uint32_t>(root)) << 32;
  std::uint64_t h = mix(seq ^ 0x6b6f6c6f66707631ull);
  h = mix(h ^ count);
  h = mix(h ^ extra);
  h = mix(h ^ small);
  return mix(h ^ magic ^ static_cast<std::uint64_t>(plane) << 32);
}

Fingerprint fingerprint(Kind k, DType t, std::size_t count, Op op, int root) {
  Fingerprint f;
  f.kind = k;
  f.dtype = t;
  f.count = count;
  f.op = (k == Kind::Allreduce || k == Kind::ReduceScatter) ? op : Op::Sum;
  f.root = root;
  return f;
}

Fingerprint fingerprint_v(DType t, std::span<const std::size_t> counts) {
  Fingerprint f = fingerprint(Kind::Allgatherv, t, 0);
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the counts
  for (std::size_t c : counts) {
    f.count += c;
    h = (h ^ c) * 1099511628211ull;
  }
  f.extra = h;
  return f;
}

Fingerprint on(Fingerprint fp, const Place& place, PlaneCode plane) {
  fp.place = place.kind;
  fp.plane = plane;
  return fp;
}

Fingerprint with_shape(Fingerprint fp, std::span<const std::int64_t> shape) {
  if (shape.empty()) return fp;
  std::uint64_t h = mix(shape.size());
  for (std::int64_t d : shape) h = mix(h ^ static_cast<std::uint64_t>(d));
  fp.extra = h | 1;  // never 0, which means "no shape"
  return fp;
}

namespace {
// Two calls that differ in the caller's shape alone: only then does an error
// show the shapes' hashes (any other difference is the one worth reading).
bool shapes_differ_alone(const Fingerprint& a, const Fingerprint& b) {
  Fingerprint x = a, y = b;
  x.extra = y.extra = 0;
  return a.kind != Kind::Allgatherv && a.extra != b.extra && x == y;
}
}  // namespace

void fail_mismatch(const Fingerprint& mine, const Fingerprint& previous, const std::string& me,
                   const Fingerprint& theirs, const std::string& them) {
  if (theirs.magic == Fingerprint::kMagic && previous.seq != 0 && theirs.seq == previous.seq &&
      !(theirs == previous)) {
    const bool shape = shapes_differ_alone(theirs, previous);
    fail("mismatched collectives at collective #{}: {} called {} while {} (this rank) "
         "called {} (and went on to #{} {})",
         previous.seq, them, theirs.call(shape), me, previous.call(shape), mine.seq, mine.call());
  }
  if (theirs.magic == Fingerprint::kMagic && theirs.seq != mine.seq)
    fail("collectives out of step: {} is at collective #{} ({}) while {} (this rank) is at #{} ({})",
         them, theirs.seq, theirs.call(), me, mine.seq, mine.call());
  // Both ranks at the same position, before anything either sent was used:
  // the one case a communicator can come back from (comm/context.h).
  const bool shape = shapes_differ_alone(theirs, mine);
  if (theirs.magic == Fingerprint::kMagic)
    fail_as<MismatchError>("mismatched collectives at collective #{}: {} called {} while {} (this rank) called {}",
                           mine.seq, them, theirs.call(shape), me, mine.call(shape));
  fail("mismatched collectives at collective #{}: {} called {} while {} (this rank) called {}",
       mine.seq, them, theirs.call(), me, mine.call());
}

}  // namespace kolo
