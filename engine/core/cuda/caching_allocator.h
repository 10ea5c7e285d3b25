// The CUDA caching allocator (DESIGN.md "Memory in a step"): freed blocks are kept in
// size-class free lists and handed out again, so after the first training step a step
// allocates nothing new from cudaMalloc. On out-of-memory the cache is released and the
// allocation retried once.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

#include "engine/core/allocator.h"

namespace driftless::cuda {

struct AllocatorStats {
  size_t bytes_in_use = 0;
  size_t peak_bytes_in_use = 0;
  size_t bytes_reserved = 0;  // in use + cached
  size_t system_allocations = 0;  // cudaMalloc calls so far
};

class CachingAllocator final : public Allocator {
 public:
  ~CachingAllocator() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cuda; }
  void release_cached();
  AllocatorStats stats() const;
  void reset_peak();
  static size_t round_size(size_t bytes);

 private:
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // rounded size -> cached block
  std::unordered_map<void*, size_t> live_;  // block in use -> its rounded size
  AllocatorStats stats_;
};

CachingAllocator& caching_allocator();

}  // namespace driftless::cuda
