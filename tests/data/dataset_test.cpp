// Readers on files written by the writers, and on corrupted files: every error is a
// driftless::Error naming the file and the byte offset.
#include "data/dataset.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "data/llmc_shards.h"
#include "data/memmap_dataset.h"
#include "data/random_dataset.h"
#include "tests/test_paths.h"

namespace driftless::data {
namespace {

std::vector<std::vector<int32_t>> sample_documents() {
  return {{1, 2, 3}, {}, {7}, {65535, 0, 40000, 5}, {9, 9}};
}

std::string write_memmap(const std::string& prefix, TokenType type,
                         const std::vector<std::vector<int32_t>>& docs) {
  MemmapWriter w(prefix, type);
  for (const auto& d : docs) w.add_document(d);
  w.finish();
  return prefix;
}

// Expects an Error whose message contains every piece.
template <class F>
void expect_error(F&& f, std::vector<std::string> pieces) {
  try {
    f();
    ADD_FAILURE() << "expected driftless::Error";
  } catch (const Error& e) {
    for (const auto& p : pieces)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message '" << e.what() << "' lacks '" << p << "'";
  }
}

void patch(const std::string& path, size_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(offset));
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

TEST(Memmap, RoundTripBothTokenTypes) {
  auto dir = testing::scratch_dir();
  for (TokenType type : {TokenType::u16, TokenType::i32}) {
    auto docs = sample_documents();
    if (type == TokenType::i32) docs.push_back({100000, 3});
    auto prefix = write_memmap(dir + "/ds_" + token_type_name(type), type, docs);
    MemmapDataset ds(prefix, 200000, 0);
    EXPECT_EQ(ds.token_type(), type);
    ASSERT_EQ(ds.num_documents(), int64_t(docs.size()));
    for (size_t d = 0; d < docs.size(); ++d) EXPECT_EQ(ds.document(int64_t(d)), docs[d]);
    std::vector<int32_t> part(2);
    ds.read(3, 1, 2, part.data());
    EXPECT_EQ(part, (std::vector<int32_t>{0, 40000}));
    ds.validate();
    EXPECT_FALSE(std::filesystem::exists(prefix + ".bin.tmp"));
  }
  // The bytes are the Megatron layout: magic, version 1, dtype code 8 for uint16.
  std::ifstream idx(dir + "/ds_uint16.idx", std::ios::binary);
  std::string head(18, '\0');
  idx.read(head.data(), 18);
  EXPECT_EQ(head.substr(0, 9), std::string("MMIDIDX\0\0", 9));
  EXPECT_EQ(head[9], 1);
  EXPECT_EQ(head[17], 8);
}

TEST(Memmap, TokenOutsideVocabularyNamesFileAndOffset) {
  auto prefix = write_memmap(testing::scratch_dir() + "/ds", TokenType::u16, sample_documents());
  MemmapDataset ds(prefix, 50257, 50256);
  EXPECT_EQ(ds.document(0), (std::vector<int32_t>{1, 2, 3}));
  // Document 3 starts at byte (3 + 0 + 1) * 2 = 8; its first token is 65535.
  expect_error([&] { ds.document(3); }, {"[memmap]", prefix + ".bin", "65535", "byte offset 8"});
  expect_error([&] { ds.validate(); }, {"byte offset 8"});
}

TEST(Memmap, CorruptedIndexAndData) {
  const auto dir = testing::scratch_dir();
  auto fresh = [&](const std::string& name) {
    return write_memmap(dir + "/" + name, TokenType::u16, sample_documents());
  };
  auto open = [](const std::string& p) { return [p] { MemmapDataset ds(p, 70000, 0); }; };
  auto p = fresh("magic");
  patch(p + ".idx", 0, "XX");
  expect_error(open(p), {p + ".idx", "magic", "offset 0"});
  p = fresh("version");
  patch(p + ".idx", 9, std::string("\x02", 1));
  expect_error(open(p), {p + ".idx", "version", "offset 9", "got 2"});
  p = fresh("dtype");
  patch(p + ".idx", 17, std::string("\x06", 1));
  expect_error(open(p), {"dtype", "offset 17", "got 6"});
  p = fresh("truncated_idx");
  std::filesystem::resize_file(p + ".idx", 20);
  expect_error(open(p), {p + ".idx", "truncated", "offset 0"});
  p = fresh("short_idx");
  std::filesystem::resize_file(p + ".idx", std::filesystem::file_size(p + ".idx") - 8);
  expect_error(open(p), {p + ".idx", "fill the file"});
  p = fresh("truncated_bin");
  std::filesystem::resize_file(p + ".bin", 10);
  expect_error(open(p), {p + ".bin", "expected 20 bytes", "got 10"});
  p = fresh("size");  // size of document 0 becomes 4: pointers no longer add up
  patch(p + ".idx", 34, std::string("\x04\0\0\0", 4));
  expect_error(open(p), {"pointer", "offset " + std::to_string(34 + 5 * 4 + 8)});
  p = fresh("negative");
  patch(p + ".idx", 38, std::string("\xff\xff\xff\xff", 4));
  expect_error(open(p), {"size >= 0", "offset 38"});
  expect_error([&] { MemmapDataset ds(dir + "/missing", 10, 0); }, {"missing.idx"});
}

TEST(Memmap, WriterRejectsTokensThatDoNotFit) {
  MemmapWriter w(testing::scratch_dir() + "/ds", TokenType::u16);
  std::vector<int32_t> bad = {70000};
  expect_error([&] { w.add_document(bad); }, {"uint16", "70000"});
}

TEST(Memmap, OpenDatasetReadsSidecarMetadata) {
  auto dir = testing::scratch_dir();
  auto prefix = write_memmap(dir + "/ds", TokenType::u16, {{1, 2, 256}});
  std::ofstream(prefix + ".json") << R"({"vocab_size": 257, "end_of_text": 256})";
  auto ds = open_dataset(prefix + ".bin");
  EXPECT_EQ(ds->vocab_size(), 257);
  EXPECT_EQ(ds->end_of_text(), 256);
  EXPECT_EQ(ds->document(0), (std::vector<int32_t>{1, 2, 256}));
  expect_error([&] { open_dataset(dir + "/nothing"); }, {"PREFIX.bin", "nothing"});
}

TEST(Memmap, BadSidecarMetadataNamesTheFile) {
  auto dir = testing::scratch_dir();
  auto prefix = write_memmap(dir + "/ds", TokenType::u16, {{1, 2, 256}});
  std::ofstream(prefix + ".json") << R"({"vocab_size": "257"})";
  expect_error([&] { open_dataset(prefix); },
               {prefix + ".json", "expected an integer vocab_size, got \"257\""});
  // Not truncated to 257.
  std::ofstream(prefix + ".json") << R"({"vocab_size": 257.9})";
  expect_error([&] { open_dataset(prefix); },
               {prefix + ".json", "expected an integer vocab_size, got 257.9"});
  std::ofstream(prefix + ".json") << R"({"vocab_size": 257, "end_of_text": 1.5})";
  expect_error([&] { open_dataset(prefix); }, {prefix + ".json", "integer end_of_text"});
  std::ofstream(prefix + ".json") << std::string(100000, '[');
  expect_error([&] { open_dataset(prefix); }, {prefix + ".json", "deeper than 64 levels"});
  std::ofstream(prefix + ".json") << R"({"vocab_size": 1000000000000})";
  expect_error([&] { open_dataset(prefix); }, {prefix + ".json", "2 <= vocab_size < 2^31"});
  std::filesystem::remove(prefix + ".json");
  std::filesystem::create_directory(prefix + ".json");
  expect_error([&] { open_dataset(prefix); }, {prefix + ".json", "got a directory"});
  std::filesystem::remove(prefix + ".json");
  ASSERT_EQ(::mkfifo((prefix + ".json").c_str(), 0600), 0);  // refused, not waited on
  expect_error([&] { open_dataset(prefix); }, {prefix + ".json", "another kind of file"});
}

TEST(LlmcShards, DocumentsSplitAfterEndOfText) {
  auto dir = testing::scratch_dir();
  const int32_t eot = 50256;
  LlmcShardDataset::write_shard(dir + "/a_000.bin", {eot, 5, 6, eot, 7, eot, 8, 9});
  LlmcShardDataset::write_shard(dir + "/a_001.bin", {eot, 1});
  auto ds = open_dataset(dir);
  ASSERT_EQ(ds->num_documents(), 6);
  EXPECT_EQ(ds->document(0), (std::vector<int32_t>{eot}));
  EXPECT_EQ(ds->document(1), (std::vector<int32_t>{5, 6, eot}));
  EXPECT_EQ(ds->document(2), (std::vector<int32_t>{7, eot}));
  EXPECT_EQ(ds->document(3), (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(ds->document(5), (std::vector<int32_t>{1}));
  auto one = open_dataset(dir + "/a_001.bin");
  EXPECT_EQ(one->num_documents(), 2);
}

TEST(LlmcShards, CorruptedShards) {
  auto dir = testing::scratch_dir();
  auto open = [](const std::string& p) { return [p] { LlmcShardDataset ds({p}, 50257, 50256); }; };
  LlmcShardDataset::write_shard(dir + "/v.bin", {1, 2, 3});
  patch(dir + "/v.bin", 4, std::string("\x03\0\0\0", 4));
  expect_error(open(dir + "/v.bin"), {"v.bin", "version", "offset 4"});
  LlmcShardDataset::write_shard(dir + "/m.bin", {1, 2, 3});
  patch(dir + "/m.bin", 0, "zz");
  expect_error(open(dir + "/m.bin"), {"m.bin", "magic", "offset 0"});
  LlmcShardDataset::write_shard(dir + "/t.bin", {1, 2, 3});
  std::filesystem::resize_file(dir + "/t.bin", 1024 + 4);
  expect_error(open(dir + "/t.bin"), {"t.bin", "3 tokens", "got 1028 bytes"});
  LlmcShardDataset::write_shard(dir + "/big.bin", {1, 60000});
  expect_error(open(dir + "/big.bin"), {"big.bin", "60000", "byte offset 1026"});
}

TEST(RandomDataset, SeededAndEndsWithEndOfText) {
  RandomDatasetConfig c;
  c.num_documents = 50;
  c.max_length = 64;
  c.mean_length = 16;
  c.vocab_size = 100;
  RandomDataset a(c), b(c);
  c.seed += 1;
  RandomDataset other(c);
  bool differs = false;
  for (int64_t d = 0; d < 50; ++d) {
    auto doc = a.document(d);
    ASSERT_GE(doc.size(), 1u);
    ASSERT_LE(doc.size(), 64u);
    EXPECT_EQ(doc.back(), 99);
    EXPECT_EQ(doc, b.document(d));
    for (size_t k = 0; k + 1 < doc.size(); ++k) EXPECT_LT(doc[k], 99);
    differs |= doc != other.document(d);
  }
  EXPECT_TRUE(differs);
  c.distribution = "fixed";
  c.mean_length = 7;
  EXPECT_EQ(RandomDataset(c).document_length(3), 7);
  c.distribution = "zipf";
  EXPECT_THROW(RandomDataset bad(c), Error);
}

}  // namespace
}  // namespace driftless::data
