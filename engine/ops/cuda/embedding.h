// Launchers of the embedding kernels (embedding.cu). Plain pointers: nvcc compiles this header
// as C++17. Default stream.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/ops/cuda/entry.h"

namespace driftless::ops::gpu {

// Embedding rows: out[i] = w[ids[i]]; backward: dw[r] = sum over positions[offsets[r] ..
// offsets[r+1]) of g[position] in increasing position order (each row owned by one block).
DL_CUDA_ENTRY(void launch_embedding_forward(DType dtype, const void* w, const int64_t* ids,
                                            void* out, int64_t n, int64_t c))
DL_CUDA_ENTRY(void launch_embedding_backward(DType dtype, const void* g, const int64_t* offsets,
                                             const int64_t* positions, void* dw, int64_t v,
                                             int64_t c))
// The same sums in f32, added to f32 gradient storage `into`, for the n_rows rows listed in
// `rows` only (the rows some id hits).
DL_CUDA_ENTRY(void launch_embedding_backward_into(DType dtype, const void* g,
                                                  const int64_t* offsets, const int64_t* positions,
                                                  const int64_t* rows, int64_t n_rows, float* into,
                                                  int64_t c))

}  // namespace driftless::ops::gpu
