// One cuBLAS and one cuBLASLt handle per device (CONTRIBUTING.md: handles are RAII types),
// created on first use with deterministic settings: no atomics, default (non-TF32) math,
// and a fixed workspace so the algorithm choice does not depend on what else is allocated.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>

namespace driftless::ops::gpu {

// The cuBLAS handle of the current device, bound to the default (compute) stream.
cublasHandle_t cublas_handle();

// The cuBLASLt handle of the current device, and the workspace its matmuls use. The
// workspace is cuBLAS's own: both libraries issue on the compute stream, so their uses of
// it are ordered.
cublasLtHandle_t cublaslt_handle();
void* gemm_workspace();
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

}  // namespace driftless::ops::gpu
