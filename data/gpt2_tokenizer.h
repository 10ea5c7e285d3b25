// GPT-2 byte-level BPE (the original encoder.json + vocab.bpe): pre-tokenise with GPT-2's
// regex (data/unicode.h), map each byte to its printable stand-in character, merge by rank.
#pragma once
#include <mutex>
#include <string>
#include <unordered_map>

#include "data/tokenizer.h"

namespace driftless::data {

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Reads DIR/encoder.json and DIR/vocab.bpe; throws driftless::Error naming a missing or
  // malformed file (with the line of vocab.bpe).
  explicit Gpt2Tokenizer(const std::string& vocab_dir);
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> tokens) const override;
  int32_t vocab_size() const override { return int32_t(decoder_.size()); }
  int32_t end_of_text() const override { return end_of_text_; }
  std::string name() const override { return "gpt2"; }

 private:
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  std::unordered_map<std::string, int32_t> encoder_;
  std::vector<std::string> decoder_;                // id -> token in stand-in characters
  std::unordered_map<std::string, int32_t> ranks_;  // "a b" -> merge rank
  std::string byte_char_[256];                      // byte -> stand-in character (UTF-8)
  std::unordered_map<std::string, uint8_t> char_byte_;
  int32_t end_of_text_ = 50256;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace driftless::data
