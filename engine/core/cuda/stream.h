// RAII CUDA streams and events. Every kernel of driftless
// runs on the compute stream, the legacy default stream; side streams (gradient
// reductions) are created non-blocking, so they overlap with it and are ordered against it
// only through events. Built only with CUDA.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace driftless::cuda {

// The stream every kernel, copy and cuBLAS call of a step is issued on.
inline cudaStream_t compute_stream() {
  return cudaStreamLegacy;
}

// Whether cuda::launch (launch.cuh) launches `kernel` with programmatic dependent launch:
// the device is sm_90 or later, DRIFTLESS_PDL is not 0 (both read once per process), and the
// kernel's code was compiled from PTX for sm_90 or later, so that its
// dependent_kernel_begin() waits (cudaFuncGetAttributes' ptxVersion, cached per kernel and
// thread).
// Counts the launches it allows.
bool use_dependent_launch(const void* kernel);
// Launches made with programmatic dependent launch so far (tests check it is in use).
int64_t dependent_launches();
// Whether the device and DRIFTLESS_PDL allow programmatic dependent launch at all.
bool dependent_launch_enabled();

class Event {
 public:
  Event();  // timing disabled: record/wait only
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  bool done() const;  // cudaEventQuery; throws on an asynchronous error
  void synchronize() const;

 private:
  cudaEvent_t event_ = nullptr;
};

class Stream {
 public:
  enum class Priority { normal, high };
  // Non-blocking. high: the device's greatest stream priority, so that when SMs free up the
  // block scheduler runs this stream's blocks (NCCL's, a few SMs' worth) before more blocks
  // of the compute stream's kernels, which would otherwise hold every SM until they end.
  explicit Stream(Priority priority = Priority::normal);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  // Work issued on this stream after the call waits for `event`.
  void wait(const Event& event) const;
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace driftless::cuda
