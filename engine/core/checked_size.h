// Overflow-checked products of sizes. A shape read from a file or a config multiplies into
// an element or byte count that must be proven to fit before anything is allocated or
// bounds-checked from it (ARCHITECTURE.md "Errors": bad input is refused before any work).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace driftless {

// a * b, or nullopt when it does not fit in 63 bits (negative factors: nullopt too).
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// The product of `dims` times `element_size` (1: the element count), or nullopt when a
// dimension is negative or the product does not fit in 63 bits.
inline std::optional<int64_t> checked_product(const std::vector<int64_t>& dims,
                                              int64_t element_size = 1) {
  std::optional<int64_t> n = element_size < 0 ? std::nullopt : std::optional<int64_t>(element_size);
  for (int64_t d : dims) {
    if (!n) return n;
    n = checked_mul(*n, d);
  }
  return n;
}

}  // namespace driftless
