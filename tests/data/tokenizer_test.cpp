// Tokenizers: byte tokenizer, GPT-2 pre-tokenisation, and GPT-2 BPE against encodings made
// by the reference JavaScript encoder (npm gpt-3-encoder 1.1.4, which uses the exact regex
// with full Unicode classes). BPE tests skip when the vocab files are absent.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "data/gpt2_tokenizer.h"
#include "data/unicode.h"
#include "engine/core/env.h"
#include "engine/core/error.h"
#include "tests/test_paths.h"

namespace driftless::data {
namespace {

std::string vocab_dir() {
  if (env_set("DRIFTLESS_VOCAB_DIR")) return env_value("DRIFTLESS_VOCAB_DIR");
  return testing::source_dir() + "/.cache/gpt2-vocab";
}

#define REQUIRE_VOCAB()                                            \
  if (!std::filesystem::exists(vocab_dir() + "/encoder.json") ||   \
      !std::filesystem::exists(vocab_dir() + "/vocab.bpe"))        \
  GTEST_SKIP() << "GPT-2 vocab files not found in " << vocab_dir() \
               << " (run data/fetch_gpt2_vocab.sh DIR or set DRIFTLESS_VOCAB_DIR)"

const Gpt2Tokenizer& gpt2() {
  static Gpt2Tokenizer tok(vocab_dir());
  return tok;
}

TEST(ByteTokenizer, RoundTripAndEndOfText) {
  ByteTokenizer tok;
  std::string text = "héllo\n\x01\xff";
  auto ids = tok.encode(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[1], 0xC3);
  EXPECT_EQ(tok.decode(ids), text);
  std::vector<int32_t> eot = {104, 256};
  EXPECT_EQ(tok.decode(eot), "h<|endoftext|>");
  std::vector<int32_t> bad = {257};
  EXPECT_THROW(tok.decode(bad), Error);
  EXPECT_EQ(make_tokenizer("byte")->vocab_size(), 257);
  EXPECT_THROW(make_tokenizer("sentencepiece"), Error);
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (auto p : gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

TEST(Gpt2Pretokenize, RegexAlternatives) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces("it's we'll 'sup"), (V{"it", "'s", " we", "'ll", " '", "sup"}));
  EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(pieces("x\n\ny"), (V{"x", "\n", "\n", "y"}));
  EXPECT_EQ(pieces("end   "), (V{"end", "   "}));
  EXPECT_EQ(pieces("v1.2 42?!"), (V{"v", "1", ".", "2", " 42", "?!"}));
  EXPECT_EQ(pieces("Привет мир"), (V{"Привет", " мир"}));
  EXPECT_EQ(pieces(""), V{});
  std::string bad = "a\xff\xfe b";  // malformed UTF-8 stays byte-exact
  std::string joined;
  for (auto& p : pieces(bad)) joined += p;
  EXPECT_EQ(joined, bad);
  EXPECT_EQ(classify(U'ß'), CharClass::letter);
  EXPECT_EQ(classify(U'語'), CharClass::letter);
  EXPECT_EQ(classify(U'½'), CharClass::number);
  EXPECT_EQ(classify(U'\u3000'), CharClass::space);
  EXPECT_EQ(classify(U'🎉'), CharClass::other);
}

TEST(Gpt2Tokenizer, KnownEncodings) {
  REQUIRE_VOCAB();
  const auto& tok = gpt2();
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.end_of_text(), 50256);
  struct Case {
    std::string text;
    std::vector<int32_t> ids;
  };
  const std::vector<Case> cases = {
      {"Hello world", {15496, 995}},
      {"The quick brown fox's tail.", {464, 2068, 7586, 21831, 338, 7894, 13}},
      {"  multiple   spaces\n\nnewlines\t tab  ",
       {220, 3294, 220, 220, 9029, 198, 198, 3605, 6615, 197, 7400, 220, 220}},
      {"naïve café Ünïcödé", {2616, 38776, 40304, 49363, 77, 26884, 66, 9101, 67, 2634}},
      {"Привет, мир!",
       {140, 253, 21169, 18849, 38857, 16843, 20375, 11, 12466, 120, 18849, 21169, 0}},
      {"Γειά σου κόσμε",
       {138, 241, 30950, 29945, 138, 105, 18074, 225, 26517, 139, 227, 7377, 118, 139, 234, 38392,
        34703, 30950}},
      {"日本語のテキスト", {33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302}},
      {"emoji 🎉 party", {368, 31370, 12520, 236, 231, 2151}},
      {"numbers 12345 and ½ ²", {77, 17024, 17031, 2231, 290, 25208, 1587, 110}},
      {"I'll we've they're DON'T 'sup", {40, 1183, 356, 1053, 484, 821, 23917, 6, 51, 705, 37330}},
      {"tabs\t\t\tend\n", {8658, 82, 197, 197, 197, 437, 198}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(tok.encode(c.text), c.ids) << c.text;
    EXPECT_EQ(tok.decode(c.ids), c.text) << c.text;
  }
}

TEST(Gpt2Tokenizer, RoundTripsNonAsciiAndMalformedText) {
  REQUIRE_VOCAB();
  const auto& tok = gpt2();
  for (std::string text : {"Ünïcödé — “quotes” … ½ ∑ ∫ 🎉🎉", "中文 한국어 עברית العربية",
                           "mixed\r\n\ttabs\u00a0nbsp", "bad \xff\xfe bytes \xc3"}) {
    auto ids = tok.encode(text);
    for (int32_t id : ids) ASSERT_LT(id, 50257);
    EXPECT_EQ(tok.decode(ids), text);
  }
  std::vector<int32_t> eot = {50256};
  EXPECT_EQ(tok.decode(eot), "<|endoftext|>");
  std::vector<int32_t> bad = {50257};
  EXPECT_THROW(tok.decode(bad), Error);
}

TEST(Gpt2Tokenizer, MissingFilesAreNamed) {
  auto dir = testing::scratch_dir();
  try {
    Gpt2Tokenizer tok(dir);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/encoder.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace driftless::data
