// The byte-level BPE both GPT-2 tokenizers share (gpt2_tokenizer.h: encoder.json + vocab.bpe;
// hf_tokenizer.h: tokenizer.json): each byte of a pre-token stands as a printable character
// (GPT-2's bytes_to_unicode), merges apply by rank, pieces map to ids through the vocabulary.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace driftless::data {

class ByteLevelBpe {
 public:
  // `vocab`: token (in stand-in characters) -> id; `merges` in rank order. `op` names the
  // owner in errors. ignore_merges: a pre-token that is itself in the vocabulary is one id
  // (tokenizers' BPE option of that name).
  ByteLevelBpe(std::string op, std::unordered_map<std::string, int32_t> vocab,
               const std::vector<std::pair<std::string, std::string>>& merges,
               bool ignore_merges = false);
  // Appends the ids of one pre-token (raw bytes).
  void encode(std::string_view word, std::vector<int32_t>& out) const;
  // The bytes a vocabulary token (in stand-in characters) stands for.
  std::string token_bytes(const std::string& token) const;
  // The stand-in character (UTF-8) of a byte.
  static const std::string& byte_char(uint8_t b);
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  std::string op_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<std::string, int32_t> ranks_;  // "a b" -> merge rank
  bool ignore_merges_ = false;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace driftless::data
