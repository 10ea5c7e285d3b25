// Memmap .bin/.idx reader and writer (see memmap_dataset.h for the layout).
#include "data/memmap_dataset.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

namespace driftless::data {

namespace {
constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kVersion = 1;
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
size_t item_size(TokenType t) {
  return t == TokenType::u16 ? 2 : 4;
}
uint8_t dtype_code(TokenType t) {
  return t == TokenType::u16 ? 8 : 4;
}
}  // namespace

const char* token_type_name(TokenType t) {
  return t == TokenType::u16 ? "uint16" : "int32";
}

TokenType token_type_for(int32_t vocab_size) {
  return vocab_size <= 65536 ? TokenType::u16 : TokenType::i32;
}

MemmapDataset::MemmapDataset(const std::string& prefix, int32_t vocab_size, int32_t end_of_text)
    : index_(prefix + ".idx", "dataset"),
      bin_(prefix + ".bin", "dataset"),
      vocab_size_(vocab_size),
      end_of_text_(end_of_text) {
  const std::string& ip = index_.path();
  index_.require(0, kHeaderBytes, "memmap");
  DL_CHECK(std::memcmp(index_.data(), kMagic, 9) == 0, "memmap",
           ip << ": expected magic MMIDIDX\\0\\0 at offset 0, got another header");
  uint64_t version = index_.read<uint64_t>(9, "memmap");
  DL_CHECK(version == kVersion, "memmap",
           ip << ": expected version 1 at offset 9, got " << version);
  uint8_t code = index_.read<uint8_t>(17, "memmap");
  DL_CHECK(code == 4 || code == 8, "memmap",
           ip << ": expected dtype code 4 (int32) or 8 (uint16) at offset 17, got " << int(code));
  type_ = code == 8 ? TokenType::u16 : TokenType::i32;
  uint64_t n = index_.read<uint64_t>(18, "memmap");
  uint64_t d = index_.read<uint64_t>(26, "memmap");
  const uint64_t want = kHeaderBytes + 12 * n + 8 * d;
  DL_CHECK(n < (uint64_t(1) << 40) && d < (uint64_t(1) << 40) && want == index_.size(), "memmap",
           ip << ": expected " << n << " sizes, pointers and " << d
              << " document-index entries to fill the file (" << want << " bytes), got "
              << index_.size() << " bytes");
  num_documents_ = int64_t(n);
  sizes_offset_ = kHeaderBytes;
  pointers_offset_ = kHeaderBytes + 4 * n;
  const size_t isz = item_size(type_);
  int64_t expect_pointer = 0;
  for (int64_t i = 0; i < num_documents_; ++i) {
    size_t off = sizes_offset_ + 4 * size_t(i);
    int32_t size = index_.read<int32_t>(off, "memmap");
    DL_CHECK(size >= 0, "memmap",
             ip << ": expected size >= 0 at offset " << off << ", got " << size);
    int64_t ptr = pointer(i);
    DL_CHECK(ptr == expect_pointer, "memmap",
             ip << ": expected pointer " << expect_pointer << " (sum of earlier sizes) at offset "
                << pointers_offset_ + 8 * size_t(i) << ", got " << ptr);
    expect_pointer += int64_t(size) * int64_t(isz);
  }
  DL_CHECK(uint64_t(expect_pointer) == bin_.size(), "memmap",
           bin_.path() << ": expected " << expect_pointer << " bytes from the index sizes, got "
                       << bin_.size() << " bytes");
  const size_t doc_index = pointers_offset_ + 8 * n;
  if (d > 0) {
    int64_t first = index_.read<int64_t>(doc_index, "memmap");
    int64_t last = index_.read<int64_t>(doc_index + 8 * (d - 1), "memmap");
    DL_CHECK(first == 0 && last == int64_t(n), "memmap",
             ip << ": expected document index from 0 to " << n << " at offset " << doc_index
                << ", got " << first << " .. " << last);
  }
}

int64_t MemmapDataset::pointer(int64_t doc) const {
  return index_.read<int64_t>(pointers_offset_ + 8 * size_t(doc), "memmap");
}

int64_t MemmapDataset::document_length(int64_t doc) const {
  DL_CHECK(doc >= 0 && doc < num_documents_, "memmap",
           "expected document index in [0, " << num_documents_ << "), got " << doc);
  return index_.read<int32_t>(sizes_offset_ + 4 * size_t(doc), "memmap");
}

void MemmapDataset::read(int64_t doc, int64_t offset, int64_t count, int32_t* out) const {
  const int64_t len = document_length(doc);
  DL_CHECK(offset >= 0 && count >= 0 && offset + count <= len, "memmap",
           "expected a token range inside document " << doc << " of " << len << " tokens, got ["
                                                     << offset << ", " << offset + count << ")");
  const size_t isz = item_size(type_);
  const size_t base = size_t(pointer(doc)) + size_t(offset) * isz;
  bin_.require(base, size_t(count) * isz, "memmap");
  const uint8_t* p = bin_.data() + base;
  for (int64_t k = 0; k < count; ++k) {
    int32_t t;
    if (type_ == TokenType::u16) {
      uint16_t u;
      std::memcpy(&u, p + 2 * k, 2);
      t = u;
    } else {
      std::memcpy(&t, p + 4 * k, 4);
    }
    DL_CHECK(t >= 0 && t < vocab_size_, "memmap",
             bin_.path() << ": expected token ids in [0, " << vocab_size_ << "), got " << t
                         << " at byte offset " << base + size_t(k) * isz);
    out[k] = t;
  }
}

void MemmapDataset::validate() const {
  std::vector<int32_t> buf;
  for (int64_t d = 0; d < num_documents_; ++d) {
    buf.resize(size_t(document_length(d)));
    read(d, 0, int64_t(buf.size()), buf.data());
  }
}

std::string MemmapDataset::describe() const {
  std::ostringstream os;
  os << "memmap " << bin_.path() << " (" << num_documents_ << " documents, "
     << token_type_name(type_) << ")";
  return os.str();
}

// ---- writer ----

MemmapWriter::MemmapWriter(const std::string& prefix, TokenType type)
    : prefix_(prefix), type_(type) {
  bin_ = std::fopen((prefix + ".bin.tmp").c_str(), "wb");
  DL_CHECK(bin_ != nullptr, "memmap", "expected to create " << prefix << ".bin.tmp");
}

MemmapWriter::~MemmapWriter() {
  if (bin_) std::fclose(bin_);
  if (!finished_) {
    std::error_code ec;
    std::filesystem::remove(prefix_ + ".bin.tmp", ec);
    std::filesystem::remove(prefix_ + ".idx.tmp", ec);
  }
}

void MemmapWriter::add_document(std::span<const int32_t> tokens) {
  DL_CHECK(!finished_, "memmap", "expected add_document before finish");
  const int64_t limit = type_ == TokenType::u16 ? 65536 : int64_t(1) << 31;
  std::vector<uint16_t> narrow;
  for (size_t k = 0; k < tokens.size(); ++k)
    DL_CHECK(tokens[k] >= 0 && tokens[k] < limit, "memmap",
             "expected token ids that fit " << token_type_name(type_) << ", got " << tokens[k]
                                            << " in document " << sizes_.size());
  size_t written;
  if (type_ == TokenType::u16) {
    narrow.assign(tokens.begin(), tokens.end());
    written = std::fwrite(narrow.data(), 2, narrow.size(), bin_);
  } else {
    written = std::fwrite(tokens.data(), 4, tokens.size(), bin_);
  }
  DL_CHECK(written == tokens.size(), "memmap", "expected to write " << prefix_ << ".bin.tmp");
  sizes_.push_back(int32_t(tokens.size()));
  tokens_ += int64_t(tokens.size());
}

void MemmapWriter::finish() {
  DL_CHECK(!finished_, "memmap", "expected one call to finish");
  DL_CHECK(std::fclose(bin_) == 0, "memmap", "expected to close " << prefix_ << ".bin.tmp");
  bin_ = nullptr;
  std::FILE* f = std::fopen((prefix_ + ".idx.tmp").c_str(), "wb");
  DL_CHECK(f != nullptr, "memmap", "expected to create " << prefix_ << ".idx.tmp");
  const uint64_t n = sizes_.size(), d = n + 1;
  const uint8_t code = dtype_code(type_);
  std::vector<int64_t> pointers(n), doc_index(d);
  int64_t ptr = 0;
  for (size_t i = 0; i < n; ++i) {
    pointers[i] = ptr;
    ptr += int64_t(sizes_[i]) * int64_t(item_size(type_));
  }
  for (size_t i = 0; i < d; ++i) doc_index[i] = int64_t(i);
  bool ok = std::fwrite(kMagic, 1, 9, f) == 9 && std::fwrite(&kVersion, 8, 1, f) == 1 &&
            std::fwrite(&code, 1, 1, f) == 1 && std::fwrite(&n, 8, 1, f) == 1 &&
            std::fwrite(&d, 8, 1, f) == 1 && std::fwrite(sizes_.data(), 4, n, f) == n &&
            std::fwrite(pointers.data(), 8, n, f) == n &&
            std::fwrite(doc_index.data(), 8, d, f) == d;
  ok = (std::fclose(f) == 0) && ok;
  DL_CHECK(ok, "memmap", "expected to write " << prefix_ << ".idx.tmp");
  std::filesystem::rename(prefix_ + ".bin.tmp", prefix_ + ".bin");
  std::filesystem::rename(prefix_ + ".idx.tmp", prefix_ + ".idx");
  finished_ = true;
}

}  // namespace driftless::data
