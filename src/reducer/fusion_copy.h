// Moving gradients in and out of fusion buffers: copy, cast between the
// floating dtypes (compression) and scale in one pass, in host memory or on
// a CUDA device (ordered on the place's stream).
#pragma once

#include <cstddef>
#include <memory>

#include "kolo/kolo.h"

namespace kolo::fusion {

// dst[i] = DstType(src[i] * scale) for count elements of floating dtypes.
// src == dst is allowed when the dtypes are equal (in-place scaling); any
// other overlap is not. f16/bf16 are scaled in f32.
void convert(void* dst, DType dt, const void* src, DType st, std::size_t count, double scale,
             const Place& place);
void zero(void* dst, std::size_t bytes, const Place& place);

// Memory of a fusion buffer, zeroed, where `place` says.
class Buffer {
 public:
  Buffer() = default;
  Buffer(std::size_t bytes, const Place& place);
  void* data() const { return data_.get(); }
  // The memory's owner, shared: what keeps it alive after the reducer lets go.
  const std::shared_ptr<void>& owner() const { return data_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  std::shared_ptr<void> data_;
};

}  // namespace kolo::fusion
