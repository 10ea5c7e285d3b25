// HuggingFace tokenizer.json (data/hf_tokenizer.h): a small byte-level BPE fixture built here in
// both real layouts (GPT-2's ByteLevel and SmolLM2's Digits + ByteLevel), round trips, digit
// splitting, special tokens, refusals naming the key, and, when GPT-2's vocabulary files are
// present, identical ids to Gpt2Tokenizer from the same vocabulary converted to tokenizer.json.
#include "data/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "data/gpt2_tokenizer.h"
#include "engine/core/env.h"
#include "engine/core/error.h"
#include "tests/test_paths.h"

namespace driftless::data {
namespace {

// Merges (in stand-in characters: "Ġ" is the space) a tiny corpus would learn; "1 2" exists so
// that Digits(individual_digits) has something to prevent.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"t", "h"}, {"th", "e"}, {"Ġ", "the"}, {"a", "n"}, {"an", "d"}, {"Ġ", "and"}, {"1", "2"},
    {"i", "n"}, {"Ġ", "in"}, {"Ã", "©"},   {"l", "l"}, {"e", "ll"}, {"h", "ell"}, {"hell", "o"}};

// A tokenizer.json as huggingface/tokenizers serializes a byte-level BPE.
nlohmann::json fixture(bool smollm2_style, bool merges_as_pairs = false) {
  nlohmann::json vocab = nlohmann::json::object();
  int32_t id = 0;
  for (int b = 0; b < 256; ++b) vocab[ByteLevelBpe::byte_char(uint8_t(b))] = id++;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : kMerges) {
    if (!vocab.contains(a + b)) vocab[a + b] = id++;
    merges.push_back(merges_as_pairs ? nlohmann::json::array({a, b}) : nlohmann::json(a + " " + b));
  }
  nlohmann::json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = {{{"id", id},
                        {"content", "<|endoftext|>"},
                        {"single_word", false},
                        {"lstrip", false},
                        {"rstrip", false},
                        {"normalized", false},
                        {"special", true}},
                       {{"id", id + 1},
                        {"content", "<|im_start|>"},
                        {"single_word", false},
                        {"lstrip", false},
                        {"rstrip", false},
                        {"normalized", false},
                        {"special", true}}};
  j["normalizer"] = nullptr;
  const nlohmann::json byte_level = {{"type", "ByteLevel"},
                                     {"add_prefix_space", false},
                                     {"trim_offsets", true},
                                     {"use_regex", true}};
  if (smollm2_style)
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level}}};
  else
    j["pre_tokenizer"] = byte_level;
  j["post_processor"] = byte_level;
  j["decoder"] = byte_level;
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}};
  return j;
}

std::string write(const nlohmann::json& j, const std::string& name = "tokenizer.json") {
  const std::string path = testing::scratch_dir() + "/" + name;
  std::ofstream(path) << j.dump();
  return path;
}

std::string error_of(const nlohmann::json& j) {
  try {
    HfTokenizer tok(write(j));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

int32_t id_of(const nlohmann::json& j, const std::string& token) {
  return j["model"]["vocab"][token].get<int32_t>();
}

TEST(HfTokenizer, MergesByRankAndRoundTrips) {
  const nlohmann::json j = fixture(false);
  HfTokenizer tok(write(j));
  EXPECT_EQ(tok.vocab_size(), int32_t(j["model"]["vocab"].size()) + 2);
  EXPECT_EQ(tok.encode("the"), std::vector<int32_t>{id_of(j, "the")});
  EXPECT_EQ(tok.encode("hello the and"),
            (std::vector<int32_t>{id_of(j, "hello"), id_of(j, "Ġthe"), id_of(j, "Ġand")}));
  // Without Digits, GPT-2's regex keeps "12" one pre-token and the merge applies.
  EXPECT_EQ(tok.encode("12"), std::vector<int32_t>{id_of(j, "12")});
  for (const std::string text :
       {std::string("the café in Zürich, 中文 and 🙂!\n\n  x 123 4567"),
        std::string("\xff\xfe"), std::string(""), std::string("   "),
        std::string("<|endoftext|> is text")}) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text) << text;
  }
  // é is two bytes, merged by "Ã ©".
  EXPECT_EQ(tok.encode("é"), std::vector<int32_t>{id_of(j, "Ã©")});
}

TEST(HfTokenizer, DigitsSplitIndividuallyLikeSmolLM2) {
  const nlohmann::json j = fixture(true);
  HfTokenizer tok(write(j));
  const int32_t one = id_of(j, "1"), two = id_of(j, "2");
  EXPECT_EQ(tok.encode("12"), (std::vector<int32_t>{one, two}));
  // The space before a digit stays a piece of its own; " the" still merges.
  EXPECT_EQ(tok.encode("the 12"), (std::vector<int32_t>{id_of(j, "the"), id_of(j, "Ġ"), one, two}));
  const std::string text = "x=12345, y=٣ and the 2024 café";
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

TEST(HfTokenizer, MergesAsPairsEqualMergesAsStrings) {
  HfTokenizer a(write(fixture(true, false), "a.json"));
  HfTokenizer b(write(fixture(true, true), "b.json"));
  const std::string text = "hello the and in 12 café";
  EXPECT_EQ(a.encode(text), b.encode(text));
}

TEST(HfTokenizer, SpecialTokens) {
  nlohmann::json j = fixture(false);
  const std::string dir = testing::scratch_dir();
  {
    std::ofstream(dir + "/tokenizer.json") << j.dump();
    HfTokenizer tok(dir + "/tokenizer.json");
    const int32_t eot = j["added_tokens"][0]["id"].get<int32_t>();
    EXPECT_EQ(tok.end_of_text(), eot);
    EXPECT_EQ(tok.decode(std::vector<int32_t>{id_of(j, "the"), eot}), "the<|endoftext|>");
    // The Tokenizer contract: special text in the input is ordinary text.
    for (int32_t id : tok.encode("<|endoftext|>")) EXPECT_NE(id, eot);
    EXPECT_THROW(tok.decode(std::vector<int32_t>{tok.vocab_size()}), Error);
  }
  // tokenizer_config.json's eos_token wins, as transformers' AutoTokenizer reads it.
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "<|im_start|>"})";
  HfTokenizer tok(dir + "/tokenizer.json");
  EXPECT_EQ(tok.end_of_text(), j["added_tokens"][1]["id"].get<int32_t>());
  // make_tokenizer takes the path (data.tokenizer accepts one).
  EXPECT_EQ(make_tokenizer(dir + "/tokenizer.json")->vocab_size(), tok.vocab_size());
}

TEST(HfTokenizer, RefusesOtherKindsNamingTheKey) {
  nlohmann::json j = fixture(false);
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(error_of(j).find("model.type \"WordPiece\""), std::string::npos) << error_of(j);
  j = fixture(false);
  j["model"]["type"] = "Unigram";
  EXPECT_NE(error_of(j).find("Unigram"), std::string::npos);
  j = fixture(false);
  j["model"]["byte_fallback"] = true;
  EXPECT_NE(error_of(j).find("byte_fallback"), std::string::npos);
  j = fixture(false);
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  EXPECT_NE(error_of(j).find("pre_tokenizer Metaspace"), std::string::npos) << error_of(j);
  j = fixture(false);
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(error_of(j).find("normalizer NFKC"), std::string::npos) << error_of(j);
  j = fixture(false);
  j["decoder"] = {{"type", "Metaspace"}};
  EXPECT_NE(error_of(j).find("decoder Metaspace"), std::string::npos) << error_of(j);
  j = fixture(true);
  j["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false;
  EXPECT_NE(error_of(j).find("individual_digits"), std::string::npos);
  j = fixture(false);
  j["added_tokens"] = nlohmann::json::array();
  EXPECT_NE(error_of(j).find("<|endoftext|>"), std::string::npos);
  j = fixture(false);
  j["model"]["vocab"].erase(ByteLevelBpe::byte_char('a'));
  EXPECT_NE(error_of(j).find("byte 97"), std::string::npos) << error_of(j);
}

std::string gpt2_vocab_dir() {
  if (env_set("DRIFTLESS_VOCAB_DIR")) return env_value("DRIFTLESS_VOCAB_DIR");
  return testing::source_dir() + "/.cache/gpt2-vocab";
}

TEST(HfTokenizer, Gpt2VocabularyAsTokenizerJsonGivesGpt2Ids) {
  const std::string dir = gpt2_vocab_dir();
  std::ifstream enc(dir + "/encoder.json"), bpe(dir + "/vocab.bpe");
  if (!enc.good() || !bpe.good())
    GTEST_SKIP() << "GPT-2 vocab files not found in " << dir
                 << " (run data/fetch_gpt2_vocab.sh DIR or set DRIFTLESS_VOCAB_DIR)";
  // What transformers' GPT2TokenizerFast writes for "gpt2".
  nlohmann::json j = fixture(false);
  j["model"]["vocab"] = nlohmann::json::parse(enc);
  j["model"]["merges"] = nlohmann::json::array();
  for (std::string line; std::getline(bpe, line);)
    if (!line.empty() && line.rfind("#version", 0) != 0) j["model"]["merges"].push_back(line);
  j["added_tokens"] = {{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}};
  HfTokenizer hf(write(j));
  Gpt2Tokenizer gpt2(dir);
  EXPECT_EQ(hf.vocab_size(), 50257);
  EXPECT_EQ(hf.end_of_text(), 50256);
  for (const std::string text :
       {std::string("Hello world! It's 2024, and the café costs 3.50€."),
        std::string("  indented\n\n\tcode(x) {return x**2;}  "),
        std::string(
            "Ünïcödé ελληνικά русский 中文 日本語 한국어 🙂👍"),
        std::string("they'll we've I'm you'd 'tis 12345678901234567890")}) {
    EXPECT_EQ(hf.encode(text), gpt2.encode(text)) << text;
    EXPECT_EQ(hf.decode(hf.encode(text)), text);
  }
}

}  // namespace
}  // namespace driftless::data
