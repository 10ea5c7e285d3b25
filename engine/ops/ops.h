// The generic differentiable ops, each one autograd node on its inputs' device; the file under
// each heading holds its CPU body and its CUDA body's host side (ARCHITECTURE.md "Generic ops").
// Floating ops take f32 or f64, and bf16 on cuda (fp32 math, one rounding); not bf16 on cpu.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace driftless::ops {

// Shape letters: B... leading batch dims, M/K/N matrix dims, C channels (last dim),
// V vocabulary, N rows, n the size of the reduced dim.

// ---- matmul.cpp ----
// a (B..., M, K) [or (B..., K, M) with trans_a], b (B..., K, N) [or (B..., N, K) with
// trans_b] -> (B..., M, N). Batch dims of a and b are equal, or one operand is 2-D and is
// broadcast over the other's batch dims.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

// ---- elementwise.cpp ----
// Numpy broadcasting: shapes align from the right; each dim is equal or 1 in one operand.
Tensor add(const Tensor& a, const Tensor& b);  // (broadcast(a, b))
Tensor sub(const Tensor& a, const Tensor& b);  // (broadcast(a, b))
Tensor mul(const Tensor& a, const Tensor& b);  // (broadcast(a, b))
Tensor scale(const Tensor& x, double s);       // (same as x)  x * s
Tensor add_scalar(const Tensor& x, double s);  // (same as x)  x + s
Tensor neg(const Tensor& x);                   // (same as x)  -x
// x (any shape broadcastable to shape) -> (shape).
Tensor broadcast_to(const Tensor& x, const Shape& shape);
// x (shape broadcast from `shape`) -> (shape): sums the broadcast dims (the adjoint of
// broadcast_to; used by the backward of every broadcasting op).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- reduce.cpp ----
// x (..., n, ...) -> (..., 1, ...) with keepdim, else dim removed. Accumulates in double.
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor sum_all(const Tensor& x);  // any shape -> () zero-dim scalar

// ---- activation.cpp ----
// GPT-2 GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu(const Tensor& x);  // (same as x)

// ---- norm.cpp ----
// x (..., C), weight (C), bias (C) -> (..., C); normalises over the last dim with biased
// variance. weight and/or bias may be undefined (Tensor()) for no affine part.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// ---- rms_norm.cpp ----
// x (..., C), weight (C) -> (..., C): x / sqrt(mean(x^2) + eps) * weight (Llama's RMSNorm;
// the mean in f32 or better, as HF computes it). One node with a fused backward.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-5);

// ---- swiglu.cpp ----
// gate_up (..., 2F) -> (..., F): silu(gate) * up with gate = [..., :F], up = [..., F:]
// (the two halves of one fused gate/up projection). One node.
Tensor swiglu(const Tensor& gate_up);

// ---- rope.cpp ----
// Rotary position embedding of the Q and K heads of a fused QKV row, HF Llama's
// rotate-half convention: qkv (N, (H + 2 H_kv) D), positions (N) i32 (a token's index in
// its document) -> (N, (H + 2 H_kv) D) with each Q and K head rotated, pair (i, i + D/2)
// by angle pos * theta^(-2i/D) (angle and its cos/sin in f32 as HF computes them), V copied.
// D even. One node; the backward rotates the gradient back.
Tensor rope(const Tensor& qkv, const Tensor& positions, int64_t heads, int64_t kv_heads,
            double theta);

// ---- softmax.cpp ----
Tensor softmax(const Tensor& x, int64_t dim = -1);      // (same as x)
Tensor log_softmax(const Tensor& x, int64_t dim = -1);  // (same as x)

// ---- loss.cpp ----
// logits (N, V) f32/f64, targets (N) i32/i64 in [0, V), loss_mask (N) floating or undefined
// (all ones) -> () scalar: sum_i mask_i * (logsumexp(logits_i) - logits_i[targets_i]).
// A target out of range is an error even where the mask is 0. One fused node; the mask also
// gets a gradient (the per-row loss).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     const Tensor& loss_mask = Tensor());

// ---- embedding.cpp ----
// weight (V, C), ids (N...) i32/i64 in [0, V) -> (N..., C). Backward: scatter-add.
Tensor embedding(const Tensor& weight, const Tensor& ids);

// ---- shape.cpp ---- (differentiable views and copies; the Tensor methods are not recorded)
// tensors: equal shapes except along dim -> (..., sum of sizes, ...). A copy.
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim);
// x (..., sum(sizes), ...) -> pieces (..., sizes[i], ...), views of x; one node.
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);  // view
Tensor reshape(const Tensor& x, const Shape& shape);        // view when possible; one -1 allowed
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);  // view
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);  // view: out[i] = x[dims[i]]
Tensor contiguous(const Tensor& x);  // same values, contiguous (self when already)

// ---- dropout.cpp ----
// Global ids of the rows (dim 0) of a dropout input, as runs: `rows` rows with consecutive
// ids from `first`.
struct DropoutRows {
  int64_t first = 0;
  int64_t rows = 0;
};
// x (R, ...) -> (same): element c of row r (n = numel / R elements a row) is kept when
// random::uniform01(seed, id(r) * n + c) >= p, and kept ones are scaled by 1/(1-p); the
// same mask on every machine and device. The mask follows a row's id, not its place in x,
// so a token dropped in one batch layout is dropped in every other (the model numbers rows
// by their place in the step's global batch). `rows` covers the R rows in order. p in
// [0, 1]; identity (no node) when !training or p == 0.
Tensor dropout(const Tensor& x, double p, uint64_t seed, const std::vector<DropoutRows>& rows,
               bool training = true);
// Rows numbered 0..R-1: element i (row-major) is kept when uniform01(seed, i) >= p.
Tensor dropout(const Tensor& x, double p, uint64_t seed, bool training = true);

}  // namespace driftless::ops
