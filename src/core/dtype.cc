// Names and sizes of the element types and reduction ops.
#include "kolo/kolo.h"

namespace kolo {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F64: case DType::I64: return 8;
    case DType::F16: case DType::BF16: return 2;
    case DType::U8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
  }
  return "?";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::Sum: return "sum";
    case Op::Average: return "average";
    case Op::Min: return "min";
    case Op::Max: return "max";
    case Op::Product: return "product";
  }
  return "?";
}

bool op_supported(DType t, Op op) {
  const bool floating = t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
  return op != Op::Average || floating;
}

}  // namespace kolo
