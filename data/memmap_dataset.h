// Megatron / Fast-LLM memmap dataset: PREFIX.bin (tokens, back to back) and PREFIX.idx
// (index). Index layout, little endian: magic "MMIDIDX\0\0" (9 bytes), version u64 = 1,
// dtype code u8 (4 = int32, 8 = uint16), n = document count u64, d = document-index count
// u64, sizes int32[n] (tokens), pointers int64[n] (byte offsets into .bin), document index
// int64[d] (0, ..., n; Megatron groups entries into documents, we treat each entry as one).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "engine/core/mapped_file.h"

namespace driftless::data {

enum class TokenType : uint8_t { u16, i32 };
const char* token_type_name(TokenType t);
// Smallest type that holds every id below vocab_size.
TokenType token_type_for(int32_t vocab_size);

class MemmapDataset final : public Dataset {
 public:
  // prefix: path without .bin/.idx. Checks the whole index on open (magic, version, dtype,
  // counts against the file size, pointers against sizes, .bin size); tokens are checked
  // against vocab_size when read, and all at once by validate().
  MemmapDataset(const std::string& prefix, int32_t vocab_size, int32_t end_of_text);

  int64_t num_documents() const override { return num_documents_; }
  int64_t document_length(int64_t doc) const override;
  void read(int64_t doc, int64_t offset, int64_t count, int32_t* out) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  int32_t end_of_text() const override { return end_of_text_; }
  std::string describe() const override;
  TokenType token_type() const { return type_; }
  // Reads every token (through the mapping) and checks it is < vocab_size.
  void validate() const;

 private:
  int64_t pointer(int64_t doc) const;
  MappedFile index_, bin_;
  TokenType type_ = TokenType::u16;
  int64_t num_documents_ = 0;
  size_t sizes_offset_ = 0, pointers_offset_ = 0;
  int32_t vocab_size_, end_of_text_;
};

// Streams documents into PREFIX.bin / PREFIX.idx. Both are written under temporary names
// and renamed by finish(), so an interrupted write never leaves a valid-looking pair.
class MemmapWriter {
 public:
  MemmapWriter(const std::string& prefix, TokenType type);
  ~MemmapWriter();
  MemmapWriter(const MemmapWriter&) = delete;
  MemmapWriter& operator=(const MemmapWriter&) = delete;
  void add_document(std::span<const int32_t> tokens);
  void finish();
  int64_t num_documents() const { return int64_t(sizes_.size()); }
  int64_t num_tokens() const { return tokens_; }

 private:
  std::string prefix_;
  TokenType type_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> sizes_;
  int64_t tokens_ = 0;
  bool finished_ = false;
};

}  // namespace driftless::data
