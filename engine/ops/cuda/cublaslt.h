// cuBLASLt for the matrix products of the fused layers: one row-major matmul entry point with
// the epilogues that pay (bias, and GELU with the pre-activation written beside the output
// for the MLP's backward). The handle and workspace are in cublas_handle.h.
#pragma once
#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/ops/cuda/entry.h"

namespace driftless::ops::gpu {

enum class LtEpilogue {
  none,
  bias,           // out = a b + bias (bias broadcast over rows)
  gelu_aux_bias,  // aux = a b + bias; out = gelu_tanh(aux). n must be a multiple of 8.
  dgelu,          // out = (a b) * gelu_tanh'(aux), aux (m, n) the pre-activation that
                  // gelu_aux_bias wrote. n must be a multiple of 8.
};
constexpr int kLtEpilogues = 4;

// Row-major out (m, n) = op(a) op(b) [+ out], a stored (ra, ca), b stored (rb, cb), rows
// contiguous (lda/ldb/ldd apart, default packed), no batch. a and b share `ab` (f32 or
// bf16); out, bias (n) and aux (m, n) are `out` (f32 or bf16). CUBLAS_COMPUTE_32F for both:
// fp32 accumulation, no TF32. (A Linear's bias gradient is not BGRADB's: that epilogue ran
// its sums as a kernel of its own at half the memory bandwidth and wrote them to be added to
// the gradient; the column-sum kernel of reduce.cu adds them in place and is faster over a
// GPT-2 step, measured in BENCHMARKS.md.)
struct LtMatmul {
  DType ab = DType::f32;
  DType out = DType::f32;
  const void* a = nullptr;
  int64_t ra = 0, ca = 0;
  bool ta = false;
  const void* b = nullptr;
  int64_t rb = 0, cb = 0;
  bool tb = false;
  void* d = nullptr;
  int64_t lda = 0, ldb = 0,
          ldd = 0;          // row strides in elements when wider than stored; 0: contiguous
  bool accumulate = false;  // d = product + c (beta = 1) instead of d = product
  const void* c = nullptr;  // accumulate's addend, laid out like d (ldd, `out`); null: d itself
  LtEpilogue epilogue = LtEpilogue::none;
  const void* bias = nullptr;
  void* aux = nullptr;
};

// Issues the product on the compute stream. Returns false, having issued nothing, when
// cuBLASLt offers no algorithm for this combination (shape, alignment, epilogue, types),
// so the caller takes its unfused path. The chosen algorithm is cached by value (bounded),
// so a given problem always runs the same kernel: results are reproducible run to run.
DL_CUDA_ENTRY(bool lt_matmul(const LtMatmul& p))

// How many products with this epilogue cuBLASLt has run in this process: tests check that
// the fused paths are taken, not only that the fallbacks are right.
DL_CUDA_ENTRY(int64_t lt_matmul_count(LtEpilogue epilogue))
// How many of them added a separate C operand (out = a b + c with c != out: a Linear's
// residual fused into the product).
DL_CUDA_ENTRY(int64_t lt_matmul_with_c_count())

}  // namespace driftless::ops::gpu
