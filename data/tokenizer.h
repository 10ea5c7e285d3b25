// Tokenizers: text <-> token ids. ByteTokenizer (256 bytes + end-of-text, no files),
// Gpt2Tokenizer (GPT-2 byte-level BPE from encoder.json + vocab.bpe, see gpt2_tokenizer.h) and
// HfTokenizer (a HuggingFace byte-level BPE tokenizer.json, see hf_tokenizer.h).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace driftless::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Ordinary text only: "<|endoftext|>" in the text is encoded as text, never as the
  // special token (callers append end_of_text() between documents).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Throws driftless::Error on an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> tokens) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t end_of_text() const = 0;
  virtual std::string name() const = 0;
};

// Byte i -> id i; end-of-text = 256 (decoded as "<|endoftext|>"); vocab_size 257.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> tokens) const override;
  int32_t vocab_size() const override { return 257; }
  int32_t end_of_text() const override { return 256; }
  std::string name() const override { return "byte"; }
};

// Folder holding encoder.json + vocab.bpe: $DRIFTLESS_VOCAB_DIR when set, else
// ./.cache/gpt2-vocab (data/fetch_gpt2_vocab.sh fills it).
std::string default_vocab_dir();

// True when `name` names a tokenizer.json file (ends in .json) rather than a built-in tokenizer.
bool is_tokenizer_json(const std::string& name);

// "byte" (alias "bytes", the run-config spelling), "gpt2" (vocab_dir: folder with encoder.json
// and vocab.bpe; empty = default) or a path ending in .json (a HuggingFace tokenizer.json).
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name,
                                          const std::string& vocab_dir = "");

}  // namespace driftless::data
