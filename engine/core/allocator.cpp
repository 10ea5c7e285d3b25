// CPU allocator and Storage lifetime.
#include "engine/core/allocator.h"

#include <cstdlib>

#include "engine/core/device_ops.h"
#include "engine/core/error.h"

namespace driftless {

void* CpuAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  DL_CHECK(ptr != nullptr, "alloc", "could not allocate " << bytes << " bytes of host memory");
  const size_t now = in_use_.fetch_add(bytes) + bytes;
  size_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  return ptr;
}

void CpuAllocator::deallocate(void* ptr, size_t bytes) {
  if (!ptr) return;
  in_use_.fetch_sub(bytes);
  std::free(ptr);
}

MemoryStats CpuAllocator::stats() const { return {in_use_.load(), peak_.load()}; }

void CpuAllocator::reset_peak() { peak_.store(in_use_.load()); }

namespace {
CpuAllocator& cpu_allocator() {
  static CpuAllocator cpu;
  return cpu;
}
}  // namespace

Allocator& allocator_for(Device device) {
  if (device == Device::cpu) return cpu_allocator();
  return cuda::allocator();
}

MemoryStats memory_stats(Device device) {
  if (device == Device::cpu) return cpu_allocator().stats();
  return cuda::memory_stats();
}

void reset_peak_memory(Device device) {
  if (device == Device::cpu) return cpu_allocator().reset_peak();
  cuda::reset_peak_memory();
}

void empty_cache(Device device) {
  if (device == Device::cuda) cuda::empty_cache();
}

Storage::Storage(Allocator& allocator, size_t bytes)
    : allocator_(allocator), data_(allocator.allocate(bytes)), bytes_(bytes) {}

Storage::~Storage() {
  if (data_) allocator_.deallocate(data_, bytes_);
}

}  // namespace driftless
