// See byte_level_bpe.h; follows openai/gpt-2 encoder.py's bpe() step by step.
#include "data/byte_level_bpe.h"

#include <array>
#include <climits>

#include "data/unicode.h"
#include "engine/core/error.h"

namespace driftless::data {

namespace {

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += char(c);
  } else if (c < 0x800) {
    s += char(0xC0 | (c >> 6));
    s += char(0x80 | (c & 0x3F));
  } else {
    s += char(0xE0 | (c >> 12));
    s += char(0x80 | ((c >> 6) & 0x3F));
    s += char(0x80 | (c & 0x3F));
  }
  return s;
}

struct ByteChars {
  std::array<std::string, 256> byte_char;
  std::unordered_map<std::string, uint8_t> char_byte;
  ByteChars() {
    // bytes_to_unicode(): printable bytes stand for themselves, the rest map to 256 + n.
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_char[size_t(b)] = utf8(printable ? char32_t(b) : char32_t(256 + n++));
      char_byte[byte_char[size_t(b)]] = uint8_t(b);
    }
  }
};

const ByteChars& byte_chars() {
  static const ByteChars table;
  return table;
}

}  // namespace

ByteLevelBpe::ByteLevelBpe(std::string op, std::unordered_map<std::string, int32_t> vocab,
                           const std::vector<std::pair<std::string, std::string>>& merges,
                           bool ignore_merges)
    : op_(std::move(op)), vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  int32_t rank = 0;
  for (const auto& [a, b] : merges) ranks_.emplace(a + " " + b, rank++);
}

const std::string& ByteLevelBpe::byte_char(uint8_t b) {
  return byte_chars().byte_char[b];
}

std::string ByteLevelBpe::token_bytes(const std::string& s) const {
  const auto& table = byte_chars().char_byte;
  std::string out;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    decode_utf8(s, i, len);
    auto it = table.find(s.substr(i, len));
    DL_CHECK(it != table.end(), op_.c_str(),
             "expected byte stand-in characters in token '" << s << "'");
    out += char(it->second);
  }
  return out;
}

void ByteLevelBpe::encode(std::string_view word, std::vector<int32_t>& out) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::string> parts;
  for (unsigned char b : word) parts.push_back(byte_char(b));
  if (ignore_merges_) {
    std::string whole;
    for (const auto& p : parts) whole += p;
    if (vocab_.count(whole)) parts = {whole};
  }
  while (parts.size() > 1) {  // merge every occurrence of the best-ranked pair
    int32_t best = INT32_MAX;
    size_t best_at = 0;
    for (size_t k = 0; k + 1 < parts.size(); ++k) {
      auto it = ranks_.find(parts[k] + " " + parts[k + 1]);
      if (it != ranks_.end() && it->second < best) {
        best = it->second;
        best_at = k;
      }
    }
    if (best == INT32_MAX) break;
    const std::string a = parts[best_at], b = parts[best_at + 1];
    std::vector<std::string> merged;
    for (size_t k = 0; k < parts.size(); ++k) {
      if (k + 1 < parts.size() && parts[k] == a && parts[k + 1] == b) {
        merged.push_back(a + b);
        ++k;
      } else {
        merged.push_back(parts[k]);
      }
    }
    parts = std::move(merged);
  }
  std::vector<int32_t> ids;
  for (const auto& p : parts) {
    auto it = vocab_.find(p);
    DL_CHECK(it != vocab_.end(), op_.c_str(),
             "expected every merged piece in the vocabulary, '" << p << "' is not");
    ids.push_back(it->second);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() > 100000) cache_.clear();
  cache_.emplace(std::string(word), std::move(ids));
}

}  // namespace driftless::data
