// Launchers of the RMS norm kernels (rms_norm.cu). Plain pointers: nvcc compiles this header
// as C++17. Default stream.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/ops/cuda/entry.h"

namespace driftless::ops::gpu {

// RMS norm over rows of c elements; rstd is of the accumulation type. The backward sums
// dweight over row chunks into scratch (rms_norm_chunks(rows) * c accumulators), then over
// the chunks in order, added to f32 storage when `accumulate`; `add` (or null) is added to dx
// before its rounding.
DL_CUDA_ENTRY(void launch_rms_norm_forward(DType dtype, const void* x, const void* w, void* out,
                                           void* rstd, int64_t rows, int64_t c, double eps))
DL_CUDA_ENTRY(int64_t rms_norm_chunks(int64_t rows))
DL_CUDA_ENTRY(void launch_rms_norm_backward(DType dtype, const void* g, const void* x,
                                            const void* w, const void* rstd, const void* add,
                                            void* dx, void* dw, void* scratch, int64_t rows,
                                            int64_t c, bool accumulate))

}  // namespace driftless::ops::gpu
