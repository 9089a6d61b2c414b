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

std::vector<std::size_t> grouped_order(const std::vector<ReducerEntry>& entries,
                                       const std::vector<std::size_t>& ready, const ReducerOptions& o) {
  struct Group {
    std::vector<std::size_t> members;
    std::size_t bytes = 0, last = 0;  // wire bytes; position in `ready` of the last member
  };
  std::vector<Group> open, done;
  for (std::size_t pos = 0; pos < ready.size(); ++pos) {
    const ReducerEntry& e = entries[ready[pos]];
    const std::size_t bytes = e.count * dtype_size(wire_dtype(e.dtype, o.wire));
    auto g = std::find_if(open.begin(), open.end(), [&](const Group& g) {
      const ReducerEntry& f = entries[g.members.front()];
      return f.dtype == e.dtype && same_place(f.place, e.place);
    });
    if (g != open.end() && g->bytes + bytes > o.bucket_bytes) {  // full: it completed at its last member
      done.push_back(std::move(*g));
      open.erase(g);
      g = open.end();
    }
    if (g == open.end()) g = open.emplace(open.end());
    g->members.push_back(ready[pos]);
    g->bytes += bytes;
    g->last = pos;
  }
  for (auto& g : open) done.push_back(std::move(g));
  std::sort(done.begin(), done.end(), [](const Group& a, const Group& b) { return a.last < b.last; });
  std::vector<std::size_t> out;
  for (const auto& g : done) out.insert(out.end(), g.members.begin(), g.members.end());
  return out;
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
