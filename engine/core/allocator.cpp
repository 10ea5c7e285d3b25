// CPU allocator and Storage lifetime.
#include "engine/core/allocator.h"

#include <cstdlib>

#include "engine/core/error.h"

namespace driftless {

void* CpuAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  DL_CHECK(ptr != nullptr, "alloc", "could not allocate " << bytes << " bytes of host memory");
  return ptr;
}

void CpuAllocator::deallocate(void* ptr, size_t) { std::free(ptr); }

Storage::Storage(Allocator& allocator, size_t bytes)
    : allocator_(allocator), data_(allocator.allocate(bytes)), bytes_(bytes) {}

Storage::~Storage() {
  if (data_) allocator_.deallocate(data_, bytes_);
}

}  // namespace driftless
