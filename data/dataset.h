// The dataset interface the sampler reads: a list of documents of token ids. Formats
// (memmap .bin/.idx, llm.c shards, random) implement it; see ARCHITECTURE.md "Data flow".
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace driftless::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t num_documents() const = 0;
  virtual int64_t document_length(int64_t doc) const = 0;
  // Copies tokens [offset, offset + count) of a document into out. Throws driftless::Error
  // (naming the file and byte offset) when a token is >= vocab_size().
  virtual void read(int64_t doc, int64_t offset, int64_t count, int32_t* out) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t end_of_text() const = 0;
  virtual std::string describe() const = 0;

  std::vector<int32_t> document(int64_t doc) const {
    std::vector<int32_t> v(size_t(document_length(doc)));
    read(doc, 0, int64_t(v.size()), v.data());
    return v;
  }
  int64_t total_tokens() const {
    int64_t n = 0;
    for (int64_t d = 0; d < num_documents(); ++d) n += document_length(d);
    return n;
  }
};

// Opens a dataset by path: PREFIX or PREFIX.bin/.idx (memmap), a .bin llm.c shard or a
// folder of them (".bin" files with the llm.c magic). vocab_size / end_of_text: when 0 / -1,
// taken from PREFIX.json (written by `driftless prepare`) if present, else GPT-2's
// (50257, 50256).
std::unique_ptr<Dataset> open_dataset(const std::string& path, int32_t vocab_size = 0,
                                      int32_t end_of_text = -1);

}  // namespace driftless::data
