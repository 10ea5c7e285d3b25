// Allocator interface and the tensor storage it backs. The CPU allocator hands out
// 64-byte aligned blocks; the CUDA caching allocator (engine/core/cuda) implements the
// same interface, so a Storage never knows which device it lives on beyond its tag.
#pragma once
#include <cstddef>
#include <atomic>
#include <memory>

#include "engine/core/dtype.h"

namespace driftless {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const = 0;
};

// Bytes handed out by an allocator: what is in use now and the peak since the last reset.
struct MemoryStats {
  size_t bytes_in_use = 0;
  size_t peak_bytes_in_use = 0;
  size_t bytes_cached = 0;        // cuda: freed blocks kept for reuse (0 on cpu)
  size_t system_allocations = 0;  // cuda: cudaMalloc calls so far (0 on cpu)
};

// 64-byte aligned host memory (cache lines, AVX-512 loads), with in-use/peak counters.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  Device device() const override { return Device::cpu; }
  MemoryStats stats() const;
  void reset_peak();

 private:
  std::atomic<size_t> in_use_{0}, peak_{0};
};

// In-use and peak bytes of the allocator of a device (cuda: the caching allocator).
MemoryStats memory_stats(Device device);
void reset_peak_memory(Device device);
// Returns cached, unused device blocks to the system (cuda); nothing to do on cpu.
void empty_cache(Device device);

// The allocator used for new tensors on a device. For cuda it throws when the build has
// no CUDA backend.
Allocator& allocator_for(Device device);

// A block of memory owned by one allocator, shared by every tensor view onto it.
class Storage {
 public:
  Storage(Allocator& allocator, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return allocator_.device(); }

 private:
  Allocator& allocator_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace driftless
