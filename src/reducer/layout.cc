#include "reducer/layout.h"

#include <algorithm>

#include "core/error.h"

namespace kolo::fusion {

namespace {
bool floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }
bool same_place(const Place& a, const Place& b) { return a.kind == b.kind && a.device == b.device; }
}  // namespace

DType wire_dtype(DType entry, Wire wire) {
  switch (wire) {
    case Wire::F16: return DType::F16;
    case Wire::BF16: return DType::BF16;
    default: return entry;
  }
}

std::vector<std::size_t> registration_order(std::size_t entries) {
  std::vector<std::size_t> order(entries);
  for (std::size_t k = 0; k < entries; ++k) order[k] = entries - 1 - k;
  return order;
}

std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<ReducerEntry>& entries,
                                                   const std::vector<std::size_t>& order,
                                                   const ReducerOptions& o) {
  std::vector<std::vector<std::size_t>> out;
  const std::size_t first_cap = std::min(o.first_bucket_bytes, o.bucket_bytes);
  std::size_t used = 0;  // wire bytes in out.back()
  for (std::size_t k : order) {
    const ReducerEntry& e = entries[k];
    if (!floating(e.dtype))
      fail("{}: gradient {} has dtype {}; only floating gradients are fused", o.what, k, dtype_name(e.dtype));
    const std::size_t bytes = e.count * dtype_size(wire_dtype(e.dtype, o.wire));
    bool fresh = out.empty();
    if (!fresh) {
      const ReducerEntry& last = entries[out.back().back()];
      const std::size_t cap = out.size() == 1 ? first_cap : o.bucket_bytes;
      // Horovod's fusion rule: a bucket never passes its cap, but an entry
      // bigger than the cap is a bucket alone.
      fresh = last.dtype != e.dtype || !same_place(last.place, e.place) || used + bytes > cap;
    }
    if (fresh) {
      out.emplace_back();
      used = 0;
    }
    out.back().push_back(k);
    used += bytes;
  }
  return out;
}

}  // namespace kolo::fusion
