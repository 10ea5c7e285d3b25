// Streams and events (stream.h). Destructors ignore errors: at process exit the driver may
// already be shutting down.
#include "engine/core/cuda/stream.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "engine/core/cuda/check.h"
#include "engine/core/env.h"

namespace driftless::cuda {

Event::Event() {
  DL_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
}
Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}
void Event::record(cudaStream_t stream) {
  DL_CUDA_CHECK(cudaEventRecord(event_, stream));
}
bool Event::done() const {
  const cudaError_t st = cudaEventQuery(event_);
  if (st == cudaErrorNotReady) return false;
  DL_CUDA_CHECK(st);
  return true;
}
void Event::synchronize() const {
  DL_CUDA_CHECK(cudaEventSynchronize(event_));
}

Stream::Stream(Priority priority) {
  int least = 0, greatest = 0;
  if (priority == Priority::high) DL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  DL_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));
}
Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}
void Stream::wait(const Event& event) const {
  DL_CUDA_CHECK(cudaStreamWaitEvent(stream_, event.get(), 0));
}
void Stream::synchronize() const {
  DL_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

bool dependent_launch_enabled() {
  static const bool enabled = [] {
    if (env_value("DRIFTLESS_PDL") == "0") return false;
    int device = 0, major = 0;
    DL_CUDA_CHECK(cudaGetDevice(&device));
    DL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return major >= 9;
  }();
  return enabled;
}

namespace {
std::atomic<int64_t> g_dependent_launches{0};
}  // namespace

bool use_dependent_launch(const void* kernel) {
  if (!dependent_launch_enabled()) return false;
  // Per kernel: compiled for sm_90+. One cache per thread, so a launch takes no lock.
  thread_local std::unordered_map<const void*, bool> waits;
  auto it = waits.find(kernel);
  if (it == waits.end()) {
    cudaFuncAttributes attr{};
    DL_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    it = waits.emplace(kernel, attr.ptxVersion >= 90).first;
  }
  if (it->second) g_dependent_launches.fetch_add(1, std::memory_order_relaxed);
  return it->second;
}

int64_t dependent_launches() {
  return g_dependent_launches.load();
}

}  // namespace driftless::cuda
