// llm.c token shards: a 256 x int32 header (magic 20240520, version 1, token count), then
// uint16 tokens. Documents are split after each end-of-text token (llm.c writes it before
// each document; a shard's leading end-of-text becomes a one-token document). Shards are
// mapped; opening scans each once (through the mapping) to find document boundaries.
#pragma once
#include <string>
#include <vector>

#include "data/dataset.h"
#include "engine/core/mapped_file.h"

namespace driftless::data {

class LlmcShardDataset final : public Dataset {
 public:
  LlmcShardDataset(const std::vector<std::string>& shard_paths, int32_t vocab_size,
                   int32_t end_of_text);
  int64_t num_documents() const override { return int64_t(docs_.size()); }
  int64_t document_length(int64_t doc) const override;
  void read(int64_t doc, int64_t offset, int64_t count, int32_t* out) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t end_of_text() const override { return end_of_text_; }
  std::string describe() const override;

  static constexpr int32_t kMagic = 20240520;
  static constexpr size_t kHeaderBytes = 256 * 4;
  // Writes a shard (for tests and tools); tokens must be < 65536.
  static void write_shard(const std::string& path, const std::vector<int32_t>& tokens);
  // True when the file starts with the llm.c magic.
  static bool is_shard(const std::string& path);

 private:
  struct Doc {
    int32_t shard;
    int64_t begin, length;  // in tokens
  };
  std::vector<MappedFile> shards_;
  std::vector<Doc> docs_;
  int32_t vocab_size_, end_of_text_;
};

}  // namespace driftless::data
