// Batched row-major GEMM through cublasGemmStridedBatchedEx. Row-major C = op(A) op(B) is
// column-major C^T = op(B)^T op(A)^T, so B goes first. f32 uses CUBLAS_COMPUTE_32F (no
// TF32: results stay close to the CPU), bf16 stores with fp32 accumulation, f64 in f64.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "engine/core/cuda/check.h"
#include "engine/ops/cuda/backend.h"
#include "engine/ops/cuda/cublas_handle.h"

namespace driftless::ops::gpu {

void gemm(DType dtype, const void* a, int64_t ra, int64_t ca, bool ta, int64_t stride_a,
          const void* b, int64_t rb, int64_t cb, bool tb, int64_t stride_b, void* c,
          int64_t batch) {
  const int64_t m = ta ? ca : ra, k = ta ? ra : ca, n = tb ? rb : cb;
  if (m * n * batch == 0) return;
  for (int64_t v : {m, n, k, ra, ca, rb, cb, batch})
    DL_CHECK(v <= INT_MAX, "matmul", "dimension " << v << " exceeds cuBLAS's int range");
  cudaDataType_t type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (dtype == DType::bf16) type = CUDA_R_16BF;
  if (dtype == DType::f64) {
    type = CUDA_R_64F;
    compute = CUBLAS_COMPUTE_64F;
  }
  DL_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f64, "matmul",
           "no cuda kernel for dtype " << dtype_name(dtype));
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const void* alpha = dtype == DType::f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = dtype == DType::f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  // k == 0: beta = 0 makes cuBLAS write zeros.
  DL_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_handle(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(n),
      int(m), int(k), alpha, b, type, int(std::max<int64_t>(cb, 1)), stride_b, a, type,
      int(std::max<int64_t>(ca, 1)), stride_a, beta, c, type, int(n), m * n, int(batch), compute,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace driftless::ops::gpu
