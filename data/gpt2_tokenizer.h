// GPT-2 byte-level BPE (the original encoder.json + vocab.bpe): pre-tokenise with GPT-2's
// regex (data/unicode.h), then byte-level BPE (data/byte_level_bpe.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/byte_level_bpe.h"
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
  std::unique_ptr<ByteLevelBpe> bpe_;
  std::vector<std::string> decoder_;  // id -> token in stand-in characters
  int32_t end_of_text_ = 50256;
};

}  // namespace driftless::data
