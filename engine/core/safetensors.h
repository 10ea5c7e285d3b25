// Reader and writer of the safetensors format (8-byte little-endian header length, JSON
// header, raw little-endian data), used by checkpoints, tensor logs (ARCHITECTURE.md "Tensor
// logs") and attention replay. Writes are atomic (temporary name, fsync, rename: ARCHITECTURE.md
// "Errors"); reads memory-map the file and copy each tensor out on request.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/mapped_file.h"
#include "engine/core/tensor.h"

namespace driftless {

// The safetensors name of a dtype ("F32", "F64", "BF16", "I32", "I64").
const char* safetensors_dtype_name(DType dtype);

// Writes `tensors` (in the given order, names unique, none called "__metadata__") and
// `metadata` to `path`. Tensors may live on any device and be non-contiguous views; they
// are copied to contiguous cpu memory first. The file is written to
// `path + ".tmp.<pid>"`, fsync'ed and renamed over `path`, so a reader never sees a
// partial file; on failure the temporary is removed and Error is thrown. A non-empty
// checksums_key adds metadata[checksums_key]: a JSON object of each tensor's checksum64
// (hex) of its stored bytes, and under kMetadataChecksumName the checksum of the other
// metadata (safetensors_metadata_checksum), so an edited value is found like damaged data.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const std::string& checksums_key = "");

// The entry of the checksums object that covers the metadata (no tensor has this name).
constexpr const char* kMetadataChecksumName = "__metadata__";
// checksum64 (hex) of every metadata entry but checksums_key, in key order.
std::string safetensors_metadata_checksum(const std::map<std::string, std::string>& metadata,
                                          const std::string& checksums_key);

// An open, memory-mapped safetensors file. The header is validated when opening (every
// tensor's dtype, shape and byte range), so get() cannot read out of bounds. Move-only.
class SafetensorsFile {
 public:
  struct Entry {
    DType dtype = DType::f32;  // what get() returns (F16 is widened to f32)
    std::string stored;        // the file's dtype name ("F32", "F16", "BOOL", ...)
    Shape shape;
    uint64_t begin = 0;  // byte offsets into the data section, [begin, end)
    uint64_t end = 0;
  };

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // Tensor names in file order (ascending data offset).
  const std::vector<std::string>& names() const { return names_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  // dtype, shape and byte range without reading the data; throws when absent.
  const Entry& entry(const std::string& name) const;
  // A fresh contiguous cpu tensor holding a copy of the data; throws when absent. F16 has
  // no DType here: it is widened to f32 (exactly). Other dtypes we do not hold (BOOL, U8,
  // I8, I16, U16, U32, U64, F8_*) are listed and bounds-checked but get() refuses them, so a
  // file with a stray buffer (old transformers' bool attn.bias) still opens.
  Tensor get(const std::string& name) const;
  // The stored bytes of a tensor (entry(name).end - begin of them), inside the mapping.
  const unsigned char* bytes(const std::string& name) const;

 private:
  friend SafetensorsFile read_safetensors(const std::string& path);
  SafetensorsFile();

  std::string path_;
  MappedFile file_;
  uint64_t data_start_ = 0;  // file offset of the data section (8 + header length)
  std::vector<std::string> names_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Opens and validates `path`. Errors name the file and, for a malformed file, the byte
// offset of the problem: truncated file, header length past the end of the file, bad
// JSON, a dtype safetensors does not define, a shape that does not match its byte range,
// offsets out of bounds or overlapping.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace driftless
