// A HuggingFace tokenizer.json of the byte-level BPE kind (GPT-2's, SmolLM2's ...): model BPE,
// pre_tokenizer ByteLevel (optionally after Digits), decoder ByteLevel. Anything else is
// refused naming the key, since a silently different tokenization would corrupt a dataset.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/byte_level_bpe.h"
#include "data/tokenizer.h"

namespace driftless::data {

class HfTokenizer final : public Tokenizer {
 public:
  // Reads `path` (a tokenizer.json). end_of_text: eos_token of a tokenizer_config.json next to
  // it when present, else the added token "<|endoftext|>"; neither is an error.
  explicit HfTokenizer(const std::string& path);
  // Ordinary text only (the Tokenizer contract): added tokens' text is encoded as text, and
  // no post_processor tokens (a BOS) are added.
  std::vector<int32_t> encode(std::string_view text) const override;
  // Added tokens decode to their content, the others to their bytes.
  std::string decode(std::span<const int32_t> tokens) const override;
  int32_t vocab_size() const override { return int32_t(decoder_.size()); }
  int32_t end_of_text() const override { return end_of_text_; }
  std::string name() const override { return path_; }

 private:
  std::string path_;
  std::unique_ptr<ByteLevelBpe> bpe_;
  std::vector<std::string> decoder_;  // id -> token (stand-in characters) or added content
  std::vector<bool> added_;           // id -> is an added token
  bool split_digits_ = false;         // Digits(individual_digits) before ByteLevel
  bool add_prefix_space_ = false;
  bool use_regex_ = true;
  int32_t end_of_text_ = -1;
};

}  // namespace driftless::data
