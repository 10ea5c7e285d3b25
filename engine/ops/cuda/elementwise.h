// Launchers of the element-wise kernels (elementwise.cu): add/sub/mul, the unary ops, GELU
// and its gradient, dropout, and the scaled copies of the loss and of gradient clipping.
// Plain pointers and POD layouts: nvcc compiles this header as C++17. Default stream.
#pragma once
#include <cstdint>

#include "engine/core/cuda/elementwise.cuh"  // kMaxDims
#include "engine/core/dtype.h"
#include "engine/ops/cuda/entry.h"

namespace driftless::ops::gpu {

using ::driftless::cuda::kMaxDims;

// Output shape of an elementwise kernel (row-major) and an operand's element strides
// read as if broadcast to it (0 along broadcast dims).
struct Layout {
  int rank = 0;
  int64_t shape[kMaxDims] = {};
};
struct Strides {
  int64_t v[kMaxDims] = {};
};

enum class BinaryKind : int { add, sub, mul, gelu_backward };  // gelu_backward: a = g, b = x
enum class UnaryKind : int { copy, scale, add_scalar, neg, gelu };

// out[i] = kind(a[off_a(i)], b[off_b(i)]) for the n row-major elements of `out`, which
// is contiguous; `dense` says both operands are contiguous in out's shape (off = i).
DL_CUDA_ENTRY(void launch_binary(BinaryKind kind, DType dtype, const Layout& out, bool dense,
                                 const void* a, const Strides& sa, const void* b, const Strides& sb,
                                 void* out_ptr, int64_t n))
// s: the scalar of scale / add_scalar.
DL_CUDA_ENTRY(void launch_unary(UnaryKind kind, DType dtype, const Layout& out, bool dense,
                                const void* x, const Strides& sx, void* out_ptr, int64_t n,
                                double s))
// Dropout: out[i] = x[off(i)] * keep_scale when uniform01(seed, row_ids[i / row_len] *
// row_len + i % row_len) >= p, else 0; row_ids is device memory, one id per row of out.
DL_CUDA_ENTRY(void launch_dropout(DType dtype, const Layout& out, bool dense, const void* x,
                                  const Strides& sx, void* out_ptr, int64_t n,
                                  const int64_t* row_ids, int64_t row_len, double keep_scale,
                                  double p, uint64_t seed))

// dst[i] += src[i] * scale (dst f32, the product rounded before the add) or dst[i] =
// bf16(src[i] * scale) (dst bf16); scale is one f32 on the device (an upstream gradient).
DL_CUDA_ENTRY(void launch_scaled_f32(const float* src, const float* scale, void* dst,
                                     DType dst_dtype, int64_t n))

// p[i] *= T(factor) in place (clip).
DL_CUDA_ENTRY(void launch_scale_inplace(DType dtype, void* p, int64_t n, double factor))

}  // namespace driftless::ops::gpu
