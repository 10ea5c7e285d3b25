// Asynchronous small host-to-device copies (ARCHITECTURE.md "Memory in a step": no host sync
// inside a step). cudaMemcpy from pageable memory waits for all earlier GPU work, so every
// upload of token ids, labels or document tables would drain the GPU's queue. Small copies
// go instead through a ring of pinned slots with cudaMemcpyAsync on the compute stream; a
// slot is reused once the event recorded after its copy has completed.
#pragma once
#include <cstddef>

namespace driftless::cuda {

// Largest copy that goes through the ring; larger ones use cudaMemcpy.
constexpr size_t kStagingSlotBytes = size_t(1) << 20;

// Copies bytes (<= kStagingSlotBytes) from host memory to device memory, ordered on the
// compute stream; the host buffer may be reused as soon as this returns.
void copy_to_device_async(void* dst, const void* src, size_t bytes);

}  // namespace driftless::cuda
