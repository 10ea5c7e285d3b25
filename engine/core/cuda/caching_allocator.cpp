// See caching_allocator.h. Sizes round to 512 B below 1 MiB and to 2 MiB above, and a
// cached block is reused only when it is at most twice the request (bounded waste).
#include "engine/core/cuda/caching_allocator.h"

#include "engine/core/cuda/check.h"
#include "engine/core/device_ops.h"

namespace driftless::cuda {

size_t CachingAllocator::round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20;
  if (bytes < (size_t(1) << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

CachingAllocator::~CachingAllocator() { release_cached(); }

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* p = nullptr;
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= 2 * size) {
    p = it->second;
    size = it->first;
    free_.erase(it);
  } else {
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the error, drop the cache, retry once
      for (auto& [s, q] : free_) {
        cudaFree(q);
        stats_.bytes_reserved -= s;
      }
      free_.clear();
      err = cudaMalloc(&p, size);
    }
    DL_CHECK(err == cudaSuccess, "cuda.alloc",
             "cudaMalloc of " << size << " bytes failed (" << cudaGetErrorString(err)
                              << "); in use " << stats_.bytes_in_use << " bytes");
    ++stats_.system_allocations;
    stats_.bytes_reserved += size;
  }
  live_[p] = size;
  stats_.bytes_in_use += size;
  if (stats_.bytes_in_use > stats_.peak_bytes_in_use)
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  return p;
}

void CachingAllocator::deallocate(void* ptr, size_t) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours; never happens through Storage
  size_t size = it->second;
  live_.erase(it);
  free_.emplace(size, ptr);
  stats_.bytes_in_use -= size;
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [s, p] : free_) {
    cudaFree(p);
    stats_.bytes_reserved -= s;
  }
  free_.clear();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

CachingAllocator& caching_allocator() {
  static CachingAllocator a;
  return a;
}

Allocator& allocator() { return caching_allocator(); }

MemoryStats memory_stats() {
  const AllocatorStats s = caching_allocator().stats();
  return {s.bytes_in_use, s.peak_bytes_in_use};
}

void reset_peak_memory() { caching_allocator().reset_peak(); }

}  // namespace driftless::cuda
