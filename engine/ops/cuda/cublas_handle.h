// One cuBLAS handle per device (CONVENTIONS.md: handles are RAII types), created on first
// use with deterministic settings: no atomics, default (non-TF32) math, and a fixed
// workspace so the algorithm choice does not depend on what else is allocated.
#pragma once
#include <cublas_v2.h>

namespace driftless::ops::gpu {

// The handle of the current device, bound to the default stream.
cublasHandle_t cublas_handle();

}  // namespace driftless::ops::gpu
