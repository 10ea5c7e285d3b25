// Launchers of the layer norm kernels (norm.cu). Plain pointers: nvcc compiles this header
// as C++17. Default stream.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/ops/cuda/entry.h"

namespace driftless::ops::gpu {

// Layer norm over rows of c elements. mean/rstd are of the accumulation type (f32 for
// f32/bf16, f64 for f64). Backward reduces dweight/dbias over row chunks into scratch
// (2 * layer_norm_chunks(rows) * c accumulators), then over chunks in order; `add` (or
// null, rows x c of dtype) is added to dx before its rounding.
DL_CUDA_ENTRY(void launch_layer_norm_forward(DType dtype, const void* x, const void* w,
                                             const void* b, void* out, void* mean, void* rstd,
                                             int64_t rows, int64_t c, double eps))
DL_CUDA_ENTRY(int64_t layer_norm_chunks(int64_t rows))
DL_CUDA_ENTRY(void launch_layer_norm_backward(DType dtype, const void* g, const void* x,
                                              const void* w, const void* mean, const void* rstd,
                                              const void* add, void* dx, void* dw, void* db,
                                              void* scratch, int64_t rows, int64_t c,
                                              bool accumulate = false))

}  // namespace driftless::ops::gpu
