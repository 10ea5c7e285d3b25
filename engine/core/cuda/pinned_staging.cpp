// The pinned staging ring (pinned_staging.h).
#include "engine/core/cuda/pinned_staging.h"

#include <array>
#include <cstring>
#include <memory>
#include <mutex>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/stream.h"

namespace driftless::cuda {

namespace {

constexpr size_t kSlots = 64;  // 64 MiB of pinned host memory

class StagingRing {
 public:
  StagingRing() {
    DL_CUDA_CHECK(cudaMallocHost(&base_, kSlots * kStagingSlotBytes));
    for (auto& e : events_) e = std::make_unique<Event>();
  }
  ~StagingRing() {
    if (base_) cudaFreeHost(base_);
  }
  void copy(void* dst, const void* src, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t s = next_++ % kSlots;
    if (used_[s]) events_[s]->synchronize();  // the slot's previous copy has been read
    char* slot = static_cast<char*>(base_) + s * kStagingSlotBytes;
    std::memcpy(slot, src, bytes);
    DL_CUDA_CHECK(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, compute_stream()));
    events_[s]->record(compute_stream());
    used_[s] = true;
  }

 private:
  std::mutex mutex_;
  void* base_ = nullptr;
  size_t next_ = 0;
  std::array<std::unique_ptr<Event>, kSlots> events_;
  std::array<bool, kSlots> used_{};
};

}  // namespace

void copy_to_device_async(void* dst, const void* src, size_t bytes) {
  DL_CHECK(bytes <= kStagingSlotBytes, "cuda.copy",
           "staged copy of " << bytes << " bytes exceeds the slot size " << kStagingSlotBytes);
  static StagingRing ring;  // one per process: the device is chosen before the first copy
  ring.copy(dst, src, bytes);
}

}  // namespace driftless::cuda
