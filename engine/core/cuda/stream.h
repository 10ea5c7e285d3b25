// RAII CUDA streams and events (issue 8 "streams and events"). Every kernel of driftless
// runs on the compute stream, the legacy default stream; side streams (gradient
// reductions) are created non-blocking, so they overlap with it and are ordered against it
// only through events. Built only with CUDA.
#pragma once
#include <cuda_runtime.h>

namespace driftless::cuda {

// The stream every kernel, copy and cuBLAS call of a step is issued on.
inline cudaStream_t compute_stream() {
  return cudaStreamLegacy;
}

// Whether cuda::launch (launch.cuh) uses programmatic dependent launch: the device is
// sm_90 or later and DL_PDL is not 0 (read once per process).
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
  Stream();  // non-blocking, default priority
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
