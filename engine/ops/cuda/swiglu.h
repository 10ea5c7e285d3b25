// Launchers of the SwiGLU kernels (swiglu.cu). Plain pointers: nvcc compiles this header as
// C++17. Default stream.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/ops/cuda/entry.h"

namespace driftless::ops::gpu {

// SwiGLU over rows of 2f (gate | up) elements -> rows of f; the backward writes
// d(gate | up) from the f-wide gradient.
DL_CUDA_ENTRY(void launch_swiglu_forward(DType dtype, const void* gate_up, void* out, int64_t rows,
                                         int64_t f))
DL_CUDA_ENTRY(void launch_swiglu_backward(DType dtype, const void* g, const void* gate_up, void* d,
                                          int64_t rows, int64_t f))

}  // namespace driftless::ops::gpu
