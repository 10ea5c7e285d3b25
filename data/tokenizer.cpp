// ByteTokenizer and the tokenizer factory (see tokenizer.h).
#include "data/tokenizer.h"

#include <cstdlib>

#include "data/gpt2_tokenizer.h"
#include "data/hf_tokenizer.h"
#include "engine/core/env.h"
#include "engine/core/error.h"

namespace driftless::data {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string ByteTokenizer::decode(std::span<const int32_t> tokens) const {
  std::string out;
  for (size_t k = 0; k < tokens.size(); ++k) {
    const int32_t t = tokens[k];
    DL_CHECK(t >= 0 && t <= 256, "byte_tokenizer",
             "expected token ids in [0, 257), got " << t << " at " << k);
    if (t == 256)
      out += "<|endoftext|>";
    else
      out += char(t);
  }
  return out;
}

std::string default_vocab_dir() {
  if (env_set("DRIFTLESS_VOCAB_DIR")) return env_value("DRIFTLESS_VOCAB_DIR");
  return ".cache/gpt2-vocab";
}

bool is_tokenizer_json(const std::string& name) {
  return name.size() >= 5 && name.compare(name.size() - 5, 5, ".json") == 0;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& name, const std::string& vocab_dir) {
  if (name == "byte" || name == "bytes") return std::make_unique<ByteTokenizer>();
  if (name == "gpt2")
    return std::make_unique<Gpt2Tokenizer>(vocab_dir.empty() ? default_vocab_dir() : vocab_dir);
  if (is_tokenizer_json(name)) return std::make_unique<HfTokenizer>(name);
  DL_FAIL("tokenizer", "expected tokenizer byte, gpt2 or a path to a tokenizer.json, got " << name);
}

}  // namespace driftless::data
