// Bounds on JSON read from files (safetensors headers, HuggingFace config.json and indexes,
// dataset sidecars): nesting is checked on the raw text before parsing, so nothing that
// walks a parsed document (dump() in an error message, destruction) recurses deeper than
// the bound, and excerpts of a value in messages are cut to a short length; a count read
// from JSON must be an integer.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace driftless {

// The nesting every JSON file driftless reads stays within (a safetensors header needs 3).
constexpr int kMaxJsonDepth = 64;

// The byte offset (in `text`) of the first '[' or '{' nested deeper than max_depth, outside
// strings; nullopt when the text stays within it. Linear, no recursion.
std::optional<size_t> json_too_deep(std::string_view text, int max_depth = kMaxJsonDepth);

// `text` cut to max_chars characters, with "..." when cut: for values quoted in errors.
std::string json_excerpt(const std::string& text, size_t max_chars = 120);

// The integer a JSON value holds: an integer, or a float with an integral value (Python
// writes 1e9 as 1000000000.0); nullopt for 1.7, NaN, text or anything else, so a count is
// refused rather than truncated.
template <class Json>
std::optional<int64_t> json_integer(const Json& j) {
  if (j.is_number_integer()) {
    if (j.is_number_unsigned() && j.template get<uint64_t>() > uint64_t(INT64_MAX))
      return std::nullopt;
    return j.template get<int64_t>();
  }
  if (!j.is_number_float()) return std::nullopt;
  const double v = j.template get<double>();
  if (!std::isfinite(v) || std::trunc(v) != v || std::abs(v) >= 9.2e18) return std::nullopt;
  return int64_t(v);
}

}  // namespace driftless
