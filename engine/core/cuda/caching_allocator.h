// The CUDA caching allocator (ARCHITECTURE.md "Memory in a step"): freed blocks are kept in
// size-class free lists and handed out again, so after the first training step a step
// allocates nothing new from cudaMalloc. Stream-aware: a block belongs to the stream it
// was allocated for (the thread's allocation stream, the compute stream unless an
// AllocationStreamGuard says otherwise) and is reused only for that stream, so a block
// freed while another stream may still read it is never handed to a kernel that could
// overwrite it early. On out-of-memory the cache is released and the allocation retried once.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/core/allocator.h"

namespace driftless::cuda {

struct AllocatorStats {
  size_t bytes_in_use = 0;
  size_t peak_bytes_in_use = 0;
  size_t bytes_reserved = 0;      // in use + cached
  size_t system_allocations = 0;  // cudaMalloc calls so far
};

// Allocations made on this thread within the guard's scope belong to `stream` (an opaque
// cudaStream_t; nullptr is the compute stream).
class AllocationStreamGuard {
 public:
  explicit AllocationStreamGuard(void* stream);
  ~AllocationStreamGuard();
  AllocationStreamGuard(const AllocationStreamGuard&) = delete;
  AllocationStreamGuard& operator=(const AllocationStreamGuard&) = delete;

 private:
  void* previous_;
};

class CachingAllocator final : public Allocator {
 public:
  ~CachingAllocator() override;
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cuda; }
  void release_cached();  // empty_cache: cudaFree every cached block
  AllocatorStats stats() const;
  void reset_peak();
  static size_t round_size(size_t bytes);

 private:
  struct Block {
    size_t size;
    void* stream;
  };
  void free_all_cached();  // mutex held

  mutable std::mutex mutex_;
  std::map<std::pair<void*, size_t>, std::vector<void*>> free_;  // (stream, size) -> blocks
  std::unordered_map<void*, Block> live_;                         // block in use -> its class
  AllocatorStats stats_;
};

CachingAllocator& caching_allocator();

}  // namespace driftless::cuda
