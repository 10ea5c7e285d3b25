// Element types and devices of tensors, and the bf16 storage type (round to nearest even).
// Part of engine/core (ARCHITECTURE.md "Precision and determinism": bf16 compute, fp32 master).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace driftless {

enum class DType : uint8_t { f32, f64, bf16, i32, i64 };
enum class Device : uint8_t { cpu, cuda };

// bfloat16 as stored: the upper 16 bits of an IEEE float. Conversion from float rounds
// to nearest even and keeps NaN a NaN.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
};

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
const char* device_name(Device device);
bool is_floating(DType dtype);

template <class T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::i64; };
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// Calls f(T{}) with T the C++ type of dtype; the one place that switches over dtypes.
template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::bf16: return f(bf16{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
  }
  return f(float{});
}

// Converts between element types through double (exact for every pair we hold).
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<From, bf16>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bf16>) {
    return bf16(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace driftless
