// See caching_allocator.h. Sizes round to 512 B below 1 MiB and to 2 MiB above, and a
// cached block is reused only when it is at most twice the request (bounded waste).
#include "engine/core/cuda/caching_allocator.h"

#include "engine/core/cuda/check.h"
#include "engine/core/device_ops.h"

namespace driftless::cuda {

namespace {
thread_local void* tls_alloc_stream = nullptr;
}

AllocationStreamGuard::AllocationStreamGuard(void* stream) : previous_(tls_alloc_stream) {
  tls_alloc_stream = stream;
}
AllocationStreamGuard::~AllocationStreamGuard() { tls_alloc_stream = previous_; }

size_t CachingAllocator::round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20;
  if (bytes < (size_t(1) << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

CachingAllocator::~CachingAllocator() { release_cached(); }

void CachingAllocator::free_all_cached() {
  for (auto& [key, blocks] : free_)
    for (void* q : blocks) {
      cudaFree(q);
      stats_.bytes_reserved -= key.second;
    }
  free_.clear();
}

void* CachingAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  size_t size = round_size(bytes);
  void* const stream = tls_alloc_stream;
  std::lock_guard<std::mutex> lock(mutex_);
  void* p = nullptr;
  auto it = free_.lower_bound({stream, size});
  if (it != free_.end() && it->first.first == stream && it->first.second <= 2 * size) {
    size = it->first.second;
    p = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) free_.erase(it);
  } else {
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the error, drop the cache, retry once
      DL_CUDA_CHECK(cudaDeviceSynchronize());  // cached blocks may still be read by kernels
      free_all_cached();
      err = cudaMalloc(&p, size);
    }
    DL_CHECK(err == cudaSuccess, "cuda.alloc",
             "cudaMalloc of " << size << " bytes failed (" << cudaGetErrorString(err)
                              << "); in use " << stats_.bytes_in_use << " bytes");
    ++stats_.system_allocations;
    stats_.bytes_reserved += size;
  }
  live_[p] = {size, stream};
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
  const Block b = it->second;
  live_.erase(it);
  free_[{b.stream, b.size}].push_back(ptr);
  stats_.bytes_in_use -= b.size;
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!free_.empty()) cudaDeviceSynchronize();  // kernels may still read freed blocks
  free_all_cached();
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
  return {s.bytes_in_use, s.peak_bytes_in_use, s.bytes_reserved - s.bytes_in_use,
          s.system_allocations};
}

void reset_peak_memory() { caching_allocator().reset_peak(); }

void empty_cache() { caching_allocator().release_cached(); }

}  // namespace driftless::cuda
