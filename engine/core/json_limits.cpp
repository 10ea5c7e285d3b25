// See json_limits.h.
#include "engine/core/json_limits.h"

namespace driftless {

std::optional<size_t> json_too_deep(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

std::string json_excerpt(const std::string& text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  return text.substr(0, max_chars) + "...";
}

}  // namespace driftless
