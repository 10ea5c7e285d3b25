// Launchers of the softmax and cross-entropy kernels (softmax.cu). Plain pointers: nvcc
// compiles this header as C++17. Default stream.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/ops/cuda/entry.h"

namespace driftless::ops::gpu {

// Softmax lines: x is contiguous (outer, n, inner), lines run along n with stride inner.
DL_CUDA_ENTRY(void launch_softmax_forward(DType dtype, const void* x, void* y, int64_t outer,
                                          int64_t n, int64_t inner, bool log))
DL_CUDA_ENTRY(void launch_softmax_backward(DType dtype, const void* g, const void* y, void* dx,
                                           int64_t outer, int64_t n, int64_t inner, bool log))

// Cross-entropy rows of logits (n, v), rows ld >= v elements apart (dlogits likewise);
// targets are i64 on the device, mask (dtype) or null. Forward writes per-row lse and
// masked loss (accumulation type); backward reads the upstream scalar gradient `go`
// (dtype, device memory).
// With dlogits (and go), the forward also writes the backward's dlogits (grad_dtype) in a
// second pass over each row it has just read: the same values as the backward kernel.
DL_CUDA_ENTRY(void launch_cross_entropy_forward(DType dtype, const void* logits,
                                                const int64_t* targets, const void* mask, void* lse,
                                                void* row_loss, int64_t n, int64_t v, int64_t ld,
                                                const void* go = nullptr, void* dlogits = nullptr,
                                                DType grad_dtype = DType::f32))
// dlogits are of grad_dtype: dtype, or bf16 from f32 logits.
DL_CUDA_ENTRY(void launch_cross_entropy_backward(DType dtype, const void* go, const void* logits,
                                                 const int64_t* targets, const void* mask,
                                                 const void* lse, void* dlogits, DType grad_dtype,
                                                 void* dmask, int64_t n, int64_t v, int64_t ld))

}  // namespace driftless::ops::gpu
