// llm.c shard reader (see llmc_shards.h).
#include "data/llmc_shards.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "engine/core/regular_file.h"

namespace driftless::data {

LlmcShardDataset::LlmcShardDataset(const std::vector<std::string>& paths, int32_t vocab_size,
                                   int32_t end_of_text)
    : vocab_size_(vocab_size), end_of_text_(end_of_text) {
  DL_CHECK(!paths.empty(), "llmc", "expected at least one shard, got none");
  for (const auto& path : paths) {
    MappedFile f(path, "dataset");
    f.require(0, kHeaderBytes, "llmc");
    int32_t magic = f.read<int32_t>(0, "llmc"), version = f.read<int32_t>(4, "llmc");
    DL_CHECK(magic == kMagic, "llmc",
             path << ": expected magic " << kMagic << " at offset 0, got " << magic);
    DL_CHECK(version == 1, "llmc", path << ": expected version 1 at offset 4, got " << version);
    int32_t n = f.read<int32_t>(8, "llmc");
    DL_CHECK(n >= 0 && kHeaderBytes + 2 * size_t(n) == f.size(), "llmc",
             path << ": expected " << n << " tokens (header at offset 8) to fill "
                  << kHeaderBytes + 2 * size_t(std::max(n, 0)) << " bytes, got " << f.size()
                  << " bytes");
    const int32_t shard = int32_t(shards_.size());
    const uint8_t* p = f.data() + kHeaderBytes;
    int64_t begin = 0;
    for (int64_t k = 0; k < n; ++k) {
      uint16_t t;
      std::memcpy(&t, p + 2 * k, 2);
      DL_CHECK(t < vocab_size, "llmc",
               path << ": expected token ids < " << vocab_size << ", got " << t
                    << " at byte offset " << kHeaderBytes + 2 * size_t(k));
      if (t == end_of_text || k == n - 1) {
        docs_.push_back({shard, begin, k + 1 - begin});
        begin = k + 1;
      }
    }
    shards_.push_back(std::move(f));
  }
}

int64_t LlmcShardDataset::document_length(int64_t doc) const {
  DL_CHECK(doc >= 0 && doc < num_documents(), "llmc",
           "expected document index in [0, " << num_documents() << "), got " << doc);
  return docs_[size_t(doc)].length;
}

void LlmcShardDataset::read(int64_t doc, int64_t offset, int64_t count, int32_t* out) const {
  const int64_t len = document_length(doc);
  DL_CHECK(offset >= 0 && count >= 0 && offset + count <= len, "llmc",
           "expected a token range inside document " << doc << " of " << len << " tokens");
  const Doc& d = docs_[size_t(doc)];
  const uint8_t* p = shards_[size_t(d.shard)].data() + kHeaderBytes + 2 * (d.begin + offset);
  for (int64_t k = 0; k < count; ++k) {
    uint16_t t;
    std::memcpy(&t, p + 2 * k, 2);
    out[k] = t;  // checked against vocab_size on open
  }
}

std::string LlmcShardDataset::describe() const {
  std::ostringstream os;
  os << "llm.c shards (" << shards_.size() << " files, " << docs_.size() << " documents)";
  return os.str();
}

void LlmcShardDataset::write_shard(const std::string& path, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = kMagic;
  header[1] = 1;
  header[2] = int32_t(tokens.size());
  std::vector<uint16_t> body(tokens.begin(), tokens.end());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), kHeaderBytes);
  out.write(reinterpret_cast<const char*>(body.data()), std::streamsize(2 * body.size()));
  DL_CHECK(out.good(), "llmc", "expected to write " << path);
}

bool LlmcShardDataset::is_shard(const std::string& path) {
  if (!non_regular_kind(path).empty()) return false;  // a FIFO is never opened (or waited on)
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  in.read(reinterpret_cast<char*>(&magic), 4);
  return in.good() && magic == kMagic;
}

}  // namespace driftless::data
