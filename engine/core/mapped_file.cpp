// mmap-based MappedFile (see mapped_file.h). Empty files are valid and map nothing; only
// regular files are mapped (regular_file.h).
#include "engine/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "engine/core/regular_file.h"

namespace driftless {

MappedFile::MappedFile(const std::string& path, const char* component) : path_(path) {
  const int fd = open_regular_file(path, component);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    DL_FAIL(component, "expected to stat " << path << ", got " << strerror(errno));
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      DL_FAIL(component, "expected to mmap " << path << ", got " << strerror(errno));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept {
  *this = std::move(other);
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

void MappedFile::require(size_t offset, size_t bytes, const char* what) const {
  DL_CHECK(offset <= size_ && bytes <= size_ - offset, what,
           path_ << ": expected " << bytes << " bytes at offset " << offset
                 << ", got a truncated file of " << size_ << " bytes");
}

}  // namespace driftless
