// A read-only memory mapping of a whole file (RAII): datasets and safetensors files are
// mapped, never loaded. Errors name the component and the file; offsets are byte offsets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "engine/core/error.h"

namespace driftless {

class MappedFile {
 public:
  MappedFile() = default;
  // component tags error messages ("[dataset] ...", "[safetensors] ...").
  explicit MappedFile(const std::string& path, const char* component = "file");
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  size_t size() const { return size_; }
  const uint8_t* data() const { return data_; }

  // Reads a T at byte offset (unaligned allowed); throws "[what] <path>: ..." when the
  // file ends before offset + sizeof(T).
  template <class T>
  T read(size_t offset, const char* what) const {
    require(offset, sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + offset, sizeof(T));
    return v;
  }
  // Throws unless [offset, offset + bytes) lies inside the file.
  void require(size_t offset, size_t bytes, const char* what) const;

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace driftless
