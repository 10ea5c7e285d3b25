// GPT-2 BPE (see gpt2_tokenizer.h); follows openai/gpt-2 encoder.py.
#include "data/gpt2_tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "data/unicode.h"
#include "engine/core/error.h"
#include "engine/core/json_limits.h"
#include "engine/core/regular_file.h"

namespace driftless::data {

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& dir) {
  const std::string enc_path = dir + "/encoder.json", bpe_path = dir + "/vocab.bpe";
  DL_CHECK(std::ifstream(enc_path).good(), "gpt2_tokenizer",
           "expected " << enc_path << " (run data/fetch_gpt2_vocab.sh or set DRIFTLESS_VOCAB_DIR)");
  const std::string enc = read_regular_file(enc_path, "gpt2_tokenizer");
  DL_CHECK(!json_too_deep(enc), "gpt2_tokenizer",
           enc_path << ": JSON nested deeper than " << kMaxJsonDepth << " levels");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(enc);
  } catch (const nlohmann::json::exception& e) {
    DL_FAIL("gpt2_tokenizer", "expected JSON in " << enc_path << ", got " << e.what());
  }
  DL_CHECK(j.is_object() && !j.empty(), "gpt2_tokenizer",
           "expected an object of token -> id in " << enc_path);
  std::unordered_map<std::string, int32_t> encoder;
  decoder_.resize(j.size());
  for (auto it = j.begin(); it != j.end(); ++it) {
    int64_t id = it.value().get<int64_t>();
    DL_CHECK(id >= 0 && id < int64_t(j.size()) && decoder_[size_t(id)].empty(), "gpt2_tokenizer",
             enc_path << ": expected ids 0.." << j.size() - 1 << " once each, got " << id << " for "
                      << it.key());
    encoder[it.key()] = int32_t(id);
    decoder_[size_t(id)] = it.key();
  }
  auto eot = encoder.find("<|endoftext|>");
  DL_CHECK(eot != encoder.end(), "gpt2_tokenizer", enc_path << ": expected <|endoftext|>");
  end_of_text_ = eot->second;
  std::ifstream bpe(bpe_path);
  DL_CHECK(bpe.good(), "gpt2_tokenizer", "expected " << bpe_path);
  std::vector<std::pair<std::string, std::string>> merges;
  std::string line;
  for (int64_t ln = 1; std::getline(bpe, line); ++ln) {
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    size_t sp = line.find(' ');
    DL_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size(), "gpt2_tokenizer",
             bpe_path << ":" << ln << ": expected a merge 'a b', got '" << line << "'");
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  DL_CHECK(!merges.empty(), "gpt2_tokenizer", bpe_path << ": expected merges, got none");
  bpe_ = std::make_unique<ByteLevelBpe>("gpt2_tokenizer", std::move(encoder), merges);
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  for (std::string_view piece : gpt2_pretokenize(text)) bpe_->encode(piece, out);
  return out;
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> tokens) const {
  std::string out;
  for (size_t k = 0; k < tokens.size(); ++k) {
    const int32_t t = tokens[k];
    DL_CHECK(t >= 0 && t < vocab_size(), "gpt2_tokenizer",
             "expected token ids in [0, " << vocab_size() << "), got " << t << " at " << k);
    const std::string& s = decoder_[size_t(t)];
    out += t == end_of_text_ ? s : bpe_->token_bytes(s);
  }
  return out;
}

}  // namespace driftless::data
