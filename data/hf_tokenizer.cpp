// See hf_tokenizer.h. Key names and defaults follow huggingface/tokenizers' serialization.
#include "data/hf_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/unicode.h"
#include "engine/core/error.h"
#include "engine/core/json_limits.h"
#include "engine/core/regular_file.h"

namespace driftless::data {

namespace {

constexpr const char* kOp = "hf_tokenizer";

bool is_null_or_empty(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

}  // namespace

HfTokenizer::HfTokenizer(const std::string& path) : path_(path) {
  const std::string text = read_regular_file(path, kOp);
  DL_CHECK(!json_too_deep(text), kOp,
           path << ": JSON nested deeper than " << kMaxJsonDepth << " levels");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    DL_FAIL(kOp, path << " is not valid JSON: " << e.what());
  }
  DL_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), kOp,
           path << ": expected a tokenizer.json object with a \"model\" object");
  const nlohmann::json& m = j["model"];
  const std::string type = m.value("type", std::string("BPE"));
  DL_CHECK(type == "BPE", kOp,
           path << ": model.type \"" << type << "\" is not supported (only byte-level BPE)");
  DL_CHECK(!m.value("byte_fallback", false), kOp,
           path << ": model.byte_fallback true (SentencePiece-style BPE) is not supported");
  DL_CHECK(m.value("dropout", nlohmann::json()).is_null(), kOp,
           path << ": model.dropout (BPE dropout) is not supported");
  DL_CHECK(
      is_null_or_empty(m, "continuing_subword_prefix") && is_null_or_empty(m, "end_of_word_suffix"),
      kOp, path << ": model.continuing_subword_prefix / end_of_word_suffix are not supported");
  // Normalizers change the text before it is split: refused, except an empty Sequence.
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    const nlohmann::json& n = j["normalizer"];
    DL_CHECK(n.value("type", std::string()) == "Sequence" && n.contains("normalizers") &&
                 n["normalizers"].empty(),
             kOp,
             path << ": normalizer " << n.value("type", std::string("?"))
                  << " is not supported (byte-level BPE has none)");
  }
  // Pre-tokenizer: ByteLevel, or Sequence[Digits(individual_digits: true), ByteLevel].
  DL_CHECK(j.contains("pre_tokenizer") && j["pre_tokenizer"].is_object(), kOp,
           path << ": pre_tokenizer is missing (expected ByteLevel)");
  std::vector<nlohmann::json> pres;
  if (j["pre_tokenizer"].value("type", std::string()) == "Sequence") {
    for (const auto& p : j["pre_tokenizer"].value("pretokenizers", nlohmann::json::array()))
      pres.push_back(p);
  } else {
    pres.push_back(j["pre_tokenizer"]);
  }
  bool byte_level = false;
  for (size_t i = 0; i < pres.size(); ++i) {
    const std::string t = pres[i].value("type", std::string("?"));
    if (t == "Digits" && i + 1 < pres.size() && !split_digits_) {
      DL_CHECK(pres[i].value("individual_digits", false), kOp,
               path << ": pre_tokenizer Digits with individual_digits false is not supported");
      split_digits_ = true;
    } else if (t == "ByteLevel" && i + 1 == pres.size()) {
      add_prefix_space_ = pres[i].value("add_prefix_space", true);
      use_regex_ = pres[i].value("use_regex", true);
      byte_level = true;
    } else {
      DL_FAIL(kOp, path << ": pre_tokenizer " << t
                        << " is not supported here (expected ByteLevel, optionally after "
                           "Digits(individual_digits) in a Sequence)");
    }
  }
  DL_CHECK(byte_level, kOp, path << ": pre_tokenizer has no ByteLevel");
  DL_CHECK(j.contains("decoder") && j["decoder"].is_object() &&
               j["decoder"].value("type", std::string()) == "ByteLevel",
           kOp,
           path << ": decoder "
                << (j.contains("decoder") && j["decoder"].is_object()
                        ? j["decoder"].value("type", std::string("?"))
                        : std::string("(none)"))
                << " is not supported (expected ByteLevel)");

  // Vocabulary and merges.
  DL_CHECK(m.contains("vocab") && m["vocab"].is_object() && !m["vocab"].empty(), kOp,
           path << ": model.vocab must be a non-empty object of token -> id");
  std::unordered_map<std::string, int32_t> vocab;
  int64_t size = 0;
  for (const auto& [token, id] : m["vocab"].items()) {
    DL_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < (1 << 30), kOp,
             path << ": model.vocab[\"" << token << "\"] is not a valid id: " << id.dump());
    vocab[token] = id.get<int32_t>();
    size = std::max<int64_t>(size, id.get<int64_t>() + 1);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& merge : m.value("merges", nlohmann::json::array())) {
    if (merge.is_string()) {
      const std::string s = merge.get<std::string>();
      const size_t sp = s.find(' ');
      DL_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size(), kOp,
               path << ": model.merges: expected \"a b\", got \"" << s << "\"");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {
      DL_CHECK(
          merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
          kOp, path << ": model.merges: expected [a, b], got " << merge.dump());
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    }
  }
  // Added tokens may lie beyond the vocabulary or replace an entry of it.
  std::vector<std::pair<int32_t, std::string>> added;
  for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
    DL_CHECK(a.contains("id") && a["id"].is_number_integer() && a.contains("content") &&
                 a["content"].is_string(),
             kOp, path << ": added_tokens: expected {id, content}, got " << a.dump());
    added.emplace_back(a["id"].get<int32_t>(), a["content"].get<std::string>());
    size = std::max<int64_t>(size, a["id"].get<int64_t>() + 1);
  }
  decoder_.assign(size_t(size), "");
  added_.assign(size_t(size), false);
  for (const auto& [token, id] : vocab) decoder_[size_t(id)] = token;
  for (const auto& [id, content] : added) {
    decoder_[size_t(id)] = content;
    added_[size_t(id)] = true;
  }
  // Byte-level BPE must be able to spell every byte, or encode would fail on some text.
  for (int b = 0; b < 256; ++b)
    DL_CHECK(vocab.count(ByteLevelBpe::byte_char(uint8_t(b))), kOp,
             path << ": model.vocab lacks the byte-level token of byte " << b
                  << " (not a byte-level BPE vocabulary)");
  bpe_ = std::make_unique<ByteLevelBpe>(kOp, std::move(vocab), merges,
                                        m.value("ignore_merges", false));

  // End of text: tokenizer_config.json's eos_token, else <|endoftext|>.
  std::string eos = "<|endoftext|>";
  const auto config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    try {
      const std::string text = read_regular_file(config.string(), kOp);
      DL_CHECK(!json_too_deep(text), kOp,
               config.string() << ": JSON nested deeper than " << kMaxJsonDepth << " levels");
      const nlohmann::json c = nlohmann::json::parse(text);
      if (c.contains("eos_token") && c["eos_token"].is_string())
        eos = c["eos_token"].get<std::string>();
      else if (c.contains("eos_token") && c["eos_token"].is_object())
        eos = c["eos_token"].value("content", eos);
    } catch (const nlohmann::json::exception& e) {
      DL_FAIL(kOp, config.string() << " is not valid JSON: " << e.what());
    }
  }
  for (const auto& [id, content] : added)
    if (content == eos) end_of_text_ = id;
  DL_CHECK(end_of_text_ >= 0, kOp,
           path << ": no added token \"" << eos
                << "\" to end documents with (eos_token of tokenizer_config.json, else "
                   "<|endoftext|>)");
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  std::string prefixed;
  if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  // Digits(individual_digits): every numeric character is a piece of its own.
  std::vector<std::string_view> pieces;
  if (split_digits_) {
    size_t start = 0;
    for (size_t i = 0, len = 0; i < text.size(); i += len) {
      if (classify(decode_utf8(text, i, len)) != CharClass::number) continue;
      if (i > start) pieces.push_back(text.substr(start, i - start));
      pieces.push_back(text.substr(i, len));
      start = i + len;
    }
    if (start < text.size()) pieces.push_back(text.substr(start));
  } else {
    pieces.push_back(text);
  }
  std::vector<int32_t> out;
  for (std::string_view piece : pieces) {
    if (!use_regex_) {
      bpe_->encode(piece, out);
      continue;
    }
    for (std::string_view word : gpt2_pretokenize(piece)) bpe_->encode(word, out);
  }
  return out;
}

std::string HfTokenizer::decode(std::span<const int32_t> tokens) const {
  std::string out;
  for (size_t k = 0; k < tokens.size(); ++k) {
    const int32_t t = tokens[k];
    DL_CHECK(t >= 0 && t < vocab_size(), kOp,
             "expected token ids in [0, " << vocab_size() << "), got " << t << " at " << k);
    out += added_[size_t(t)] ? decoder_[size_t(t)] : bpe_->token_bytes(decoder_[size_t(t)]);
  }
  return out;
}

}  // namespace driftless::data
