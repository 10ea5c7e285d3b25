// Names and sizes of dtypes and devices.
#include "engine/core/dtype.h"

namespace driftless {

size_t dtype_size(DType dtype) {
  return visit_dtype(dtype, [](auto v) { return sizeof(v); });
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

const char* device_name(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16;
}

}  // namespace driftless
