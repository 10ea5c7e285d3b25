// GPT-2 BPE (see gpt2_tokenizer.h); follows openai/gpt-2 encoder.py step by step.
#include "data/gpt2_tokenizer.h"

#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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
}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& dir) {
  // bytes_to_unicode(): printable bytes stand for themselves, the rest map to 256 + n.
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    byte_char_[b] = utf8(printable ? char32_t(b) : char32_t(256 + n++));
    char_byte_[byte_char_[b]] = uint8_t(b);
  }
  const std::string enc_path = dir + "/encoder.json", bpe_path = dir + "/vocab.bpe";
  std::ifstream enc(enc_path);
  DL_CHECK(enc.good(), "gpt2_tokenizer",
           "expected " << enc_path << " (run data/fetch_gpt2_vocab.sh or set DRIFTLESS_VOCAB_DIR)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(enc);
  } catch (const nlohmann::json::exception& e) {
    DL_FAIL("gpt2_tokenizer", "expected JSON in " << enc_path << ", got " << e.what());
  }
  DL_CHECK(j.is_object() && !j.empty(), "gpt2_tokenizer",
           "expected an object of token -> id in " << enc_path);
  decoder_.resize(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    int64_t id = it.value().get<int64_t>();
    DL_CHECK(id >= 0 && id < int64_t(j.size()) && decoder_[size_t(id)].empty(), "gpt2_tokenizer",
             enc_path << ": expected ids 0.." << j.size() - 1 << " once each, got " << id << " for "
                      << it.key());
    encoder_[it.key()] = int32_t(id);
    decoder_[size_t(id)] = it.key();
  }
  auto eot = encoder_.find("<|endoftext|>");
  DL_CHECK(eot != encoder_.end(), "gpt2_tokenizer", enc_path << ": expected <|endoftext|>");
  end_of_text_ = eot->second;
  std::ifstream bpe(bpe_path);
  DL_CHECK(bpe.good(), "gpt2_tokenizer", "expected " << bpe_path);
  std::string line;
  int32_t rank = 0;
  for (int64_t ln = 1; std::getline(bpe, line); ++ln) {
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    size_t sp = line.find(' ');
    DL_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size(), "gpt2_tokenizer",
             bpe_path << ":" << ln << ": expected a merge 'a b', got '" << line << "'");
    ranks_[line] = rank++;
  }
  DL_CHECK(rank > 0, "gpt2_tokenizer", bpe_path << ": expected merges, got none");
}

void Gpt2Tokenizer::bpe(std::string_view word, std::vector<int32_t>& out) const {
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::string> parts;
  for (unsigned char b : word) parts.push_back(byte_char_[b]);
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
    auto it = encoder_.find(p);
    DL_CHECK(it != encoder_.end(), "gpt2_tokenizer",
             "expected every merged piece in encoder.json, got a missing one");
    ids.push_back(it->second);
  }
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() > 100000) cache_.clear();
  cache_.emplace(std::string(word), std::move(ids));
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  for (std::string_view piece : gpt2_pretokenize(text)) bpe(piece, out);
  return out;
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> tokens) const {
  std::string out;
  for (size_t k = 0; k < tokens.size(); ++k) {
    const int32_t t = tokens[k];
    DL_CHECK(t >= 0 && t < vocab_size(), "gpt2_tokenizer",
             "expected token ids in [0, " << vocab_size() << "), got " << t << " at " << k);
    const std::string& s = decoder_[size_t(t)];
    if (t == end_of_text_) {
      out += s;
      continue;
    }
    for (size_t i = 0, len = 0; i < s.size(); i += len) {
      decode_utf8(s, i, len);
      auto it = char_byte_.find(s.substr(i, len));
      DL_CHECK(it != char_byte_.end(), "gpt2_tokenizer",
               "expected byte stand-in characters in token " << t);
      out += char(it->second);
    }
  }
  return out;
}

}  // namespace driftless::data
