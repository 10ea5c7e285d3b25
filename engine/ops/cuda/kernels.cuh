// Launchers of the generic ops' CUDA kernels (engine/ops/cuda/*.cu), called by the host
// glue in backend.cpp. Plain pointers and POD layouts only: this header is compiled as
// C++17 by nvcc and must not see tensor.h. All launches go to the default stream.
#pragma once
#include <cstdint>

#include "engine/core/cuda/elementwise.cuh"  // kMaxDims
#include "engine/core/dtype.h"

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
void launch_binary(BinaryKind kind, DType dtype, const Layout& out, bool dense, const void* a,
                   const Strides& sa, const void* b, const Strides& sb, void* out_ptr, int64_t n);
// s: the scalar of scale / add_scalar.
void launch_unary(UnaryKind kind, DType dtype, const Layout& out, bool dense, const void* x,
                  const Strides& sx, void* out_ptr, int64_t n, double s);
// Dropout: out[i] = x[off(i)] * keep_scale when uniform01(seed, row_ids[i / row_len] *
// row_len + i % row_len) >= p, else 0; row_ids is device memory, one id per row of out.
void launch_dropout(DType dtype, const Layout& out, bool dense, const void* x, const Strides& sx,
                    void* out_ptr, int64_t n, const int64_t* row_ids, int64_t row_len,
                    double keep_scale, double p, uint64_t seed);

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
int64_t reduce_chunks(const ReduceLayout& layout);
// A Linear's bias gradient: db (n, f32 gradient storage) += the column sums of dy (rows, n)
// row-major, f32 or bf16, summed over chunks of rows into scratch (bias_grad_chunks(rows) * n
// floats), then over the chunks in order.
int64_t bias_grad_chunks(int64_t rows);
void launch_bias_grad(DType dtype, const void* dy, int64_t rows, int64_t n, float* db,
                      float* scratch);
void launch_reduce(DType dtype, const void* x, const ReduceLayout& layout, void* out,
                   double factor, void* scratch);

// Sum (or sum of squares) of n contiguous elements in two fixed passes: block partials
// into `scratch` (sum_all_parts(n) accumulators of the accumulation type: f64 when
// double_acc or dtype is f64, else f32), then one block sums them in order into *out
// (dtype out_dtype, device memory), times factor.
int sum_all_parts(int64_t n);
void launch_sum_all(DType dtype, const void* x, int64_t n, bool square, bool double_acc,
                    void* scratch, void* out, DType out_dtype, double factor);

// Layer norm over rows of c elements. mean/rstd are of the accumulation type (f32 for
// f32/bf16, f64 for f64). Backward reduces dweight/dbias over row chunks into scratch
// (2 * layer_norm_chunks(rows) * c accumulators), then over chunks in order; `add` (or
// null, rows x c of dtype) is added to dx before its rounding.
void launch_layer_norm_forward(DType dtype, const void* x, const void* w, const void* b, void* out,
                               void* mean, void* rstd, int64_t rows, int64_t c, double eps);
int64_t layer_norm_chunks(int64_t rows);
void launch_layer_norm_backward(DType dtype, const void* g, const void* x, const void* w,
                                const void* mean, const void* rstd, const void* add, void* dx,
                                void* dw, void* db, void* scratch, int64_t rows, int64_t c,
                                bool accumulate = false);

// RMS norm over rows of c elements (rms_norm.cu); rstd is of the accumulation type. The
// backward sums dweight over row chunks into scratch (rms_norm_chunks(rows) * c
// accumulators), then over the chunks in order, added to f32 storage when `accumulate`;
// `add` (or null) is added to dx before its rounding.
void launch_rms_norm_forward(DType dtype, const void* x, const void* w, void* out, void* rstd,
                             int64_t rows, int64_t c, double eps);
int64_t rms_norm_chunks(int64_t rows);
void launch_rms_norm_backward(DType dtype, const void* g, const void* x, const void* w,
                              const void* rstd, const void* add, void* dx, void* dw, void* scratch,
                              int64_t rows, int64_t c, bool accumulate);

// SwiGLU over rows of 2f (gate | up) elements -> rows of f (swiglu.cu); the backward writes
// d(gate | up) from the f-wide gradient.
void launch_swiglu_forward(DType dtype, const void* gate_up, void* out, int64_t rows, int64_t f);
void launch_swiglu_backward(DType dtype, const void* g, const void* gate_up, void* d, int64_t rows,
                            int64_t f);

// Rotary frequencies by value in the launch (no copy to the device): head dims up to
// 2 * kRopeMaxHalf.
constexpr int kRopeMaxHalf = 256;
struct RopeFreqs {
  float inv_freq[kRopeMaxHalf] = {};
};
// Rows of w elements, the first `rotated` heads of d turned by f32(positions[r]) *
// inv_freq[i] (the opposite angle when inverse), the rest copied (rope.cu).
void launch_rope(DType dtype, const void* x, const int32_t* positions, void* out, int64_t rows,
                 int64_t w, int64_t rotated, int64_t d, const RopeFreqs& freqs, bool inverse);

// Softmax lines: x is contiguous (outer, n, inner), lines run along n with stride inner.
void launch_softmax_forward(DType dtype, const void* x, void* y, int64_t outer, int64_t n,
                            int64_t inner, bool log);
void launch_softmax_backward(DType dtype, const void* g, const void* y, void* dx, int64_t outer,
                             int64_t n, int64_t inner, bool log);

// Cross-entropy rows of logits (n, v), rows ld >= v elements apart (dlogits likewise);
// targets are i64 on the device, mask (dtype) or null. Forward writes per-row lse and
// masked loss (accumulation type); backward reads the upstream scalar gradient `go`
// (dtype, device memory).
// With dlogits (and go), the forward also writes the backward's dlogits (grad_dtype) in a
// second pass over each row it has just read: the same values as the backward kernel.
void launch_cross_entropy_forward(DType dtype, const void* logits, const int64_t* targets,
                                  const void* mask, void* lse, void* row_loss, int64_t n,
                                  int64_t v, int64_t ld, const void* go = nullptr,
                                  void* dlogits = nullptr, DType grad_dtype = DType::f32);
// dlogits are of grad_dtype: dtype, or bf16 from f32 logits.
void launch_cross_entropy_backward(DType dtype, const void* go, const void* logits,
                                   const int64_t* targets, const void* mask, const void* lse,
                                   void* dlogits, DType grad_dtype, void* dmask, int64_t n,
                                   int64_t v, int64_t ld);

// Embedding rows: out[i] = w[ids[i]]; backward: dw[r] = sum over positions[offsets[r] ..
// offsets[r+1]) of g[position] in increasing position order (each row owned by one block).
void launch_embedding_forward(DType dtype, const void* w, const int64_t* ids, void* out, int64_t n,
                              int64_t c);
void launch_embedding_backward(DType dtype, const void* g, const int64_t* offsets,
                               const int64_t* positions, void* dw, int64_t v, int64_t c);
// The same sums in f32, added to f32 gradient storage `into`, for the n_rows rows listed in
// `rows` only (the rows some id hits).
void launch_embedding_backward_into(DType dtype, const void* g, const int64_t* offsets,
                                    const int64_t* positions, const int64_t* rows, int64_t n_rows,
                                    float* into, int64_t c);

// dst[i] += src[i] * scale (dst f32, the product rounded before the add) or dst[i] =
// bf16(src[i] * scale) (dst bf16); scale is one f32 on the device (an upstream gradient).
void launch_scaled_f32(const float* src, const float* scale, void* dst, DType dst_dtype,
                       int64_t n);

// p[i] *= T(factor) in place (clip).
void launch_scale_inplace(DType dtype, void* p, int64_t n, double factor);

}  // namespace driftless::ops::gpu
