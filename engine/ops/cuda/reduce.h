// Launchers of the deterministic reductions (reduce.cu): sums over any set of dims, the
// two-pass sum over everything, and a Linear's bias gradient. Plain pointers and POD layouts:
// nvcc compiles this header as C++17. Default stream.
#pragma once
#include <cstdint>

#include "engine/core/cuda/elementwise.cuh"  // kMaxDims
#include "engine/core/dtype.h"
#include "engine/ops/cuda/entry.h"

namespace driftless::ops::gpu {

using ::driftless::cuda::kMaxDims;

// out[o] = factor * sum_r x[kept_offset(o) + red_offset(r)]: kept dims index the
// contiguous output, reduced dims are summed in a fixed order (deterministic, no atomics).
struct ReduceLayout {
  int kept_rank = 0, red_rank = 0;
  int64_t kept_shape[kMaxDims] = {}, kept_strides[kMaxDims] = {};
  int64_t red_shape[kMaxDims] = {}, red_strides[kMaxDims] = {};
  int64_t n_out = 1, n_red = 1;
};
// Outputs few and sums long (a broadcast bias's gradient) are summed in reduce_chunks(layout) > 1
// chunks of rows, then the chunks in order: scratch holds chunks * n_out accumulators
// (f32, f64 for f64), null when reduce_chunks is 1.
DL_CUDA_ENTRY(int64_t reduce_chunks(const ReduceLayout& layout))
// A Linear's bias gradient: db (n, f32 gradient storage) += the column sums of dy (rows, n)
// row-major, f32 or bf16, summed over chunks of rows into scratch (bias_grad_chunks(rows) * n
// floats), then over the chunks in order.
DL_CUDA_ENTRY(int64_t bias_grad_chunks(int64_t rows))
DL_CUDA_ENTRY(void launch_bias_grad(DType dtype, const void* dy, int64_t rows, int64_t n, float* db,
                                    float* scratch))
DL_CUDA_ENTRY(void launch_reduce(DType dtype, const void* x, const ReduceLayout& layout, void* out,
                                 double factor, void* scratch))

// Sum (or sum of squares) of n contiguous elements in two fixed passes: block partials
// into `scratch` (sum_all_parts(n) accumulators of the accumulation type: f64 when
// double_acc or dtype is f64, else f32), then one block sums them in order into *out
// (dtype out_dtype, device memory), times factor.
DL_CUDA_ENTRY(int sum_all_parts(int64_t n))
DL_CUDA_ENTRY(void launch_sum_all(DType dtype, const void* x, int64_t n, bool square,
                                  bool double_acc, void* scratch, void* out, DType out_dtype,
                                  double factor))

}  // namespace driftless::ops::gpu
