// The CUDA bodies that code outside their op's own file calls directly: the GEMMs (matmul,
// the fused Linear layers of layers/linear.cpp, the chunked LM loss), element-wise kernels
// (the loss's scaling, linear's GELU gradient), sum_to and the cross-entropy passes; every
// other CUDA body stays in its op's file (ARCHITECTURE.md "Generic ops"). Inputs arrive
// validated; outputs are fresh contiguous cuda tensors. f32, bf16 (fp32 math, one rounding), f64.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/ops/cuda/entry.h"

namespace driftless::ops::gpu {

// ---- cuda/gemm.cpp (cuBLAS, cuBLASLt) ----
// c (batch, m, n) = op(a_i) op(b_i) for each batch item i, a_i at a + i * stride_a
// elements (stride 0: the same matrix for every item), a stored (ra, ca), b (rb, cb),
// row-major, contiguous. cuBLAS, fp32 accumulation (f64 for f64), no TF32.
DL_CUDA_ENTRY(void gemm(DType dtype, const void* a, int64_t ra, int64_t ca, bool ta,
                        int64_t stride_a, const void* b, int64_t rb, int64_t cb, bool tb,
                        int64_t stride_b, void* c, int64_t batch))

// f32 c (m, n) = op(a) op(b), or += with accumulate, for one matrix stored as in gemm; a and
// b share dtype ab (f32 or bf16). The fp32 output of bf16 operands (layers/lm_loss: logits
// and gradient chunks). cuBLASLt, fp32 accumulation. lda / ldb / ldc: the row strides of
// a, b and c in elements when they are wider than stored (0: contiguous); padding rows to
// a multiple of 8 elements keeps the tensor-core kernels (odd strides fall back to
// byte-aligned ones, several times slower).
DL_CUDA_ENTRY(void gemm_f32_out(DType ab, const void* a, int64_t ra, int64_t ca, bool ta,
                                const void* b, int64_t rb, int64_t cb, bool tb, void* c,
                                bool accumulate, int64_t lda = 0, int64_t ldb = 0, int64_t ldc = 0))
// x (N, in), weight (out, in), bias (out) or undefined, contiguous, one dtype -> x w^T + b
// (N, out) [+ residual (N, out), contiguous, same dtype]; the bias is added in cuBLASLt's
// epilogue and the residual as its C operand (beta = 1) where it has an algorithm.
DL_CUDA_ENTRY(Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& residual = Tensor()))
// Same arguments -> {gelu(x w^T + b), x w^T + b} (both (N, out)): in bf16 one GEMM with
// the GELU_AUX_BIAS epilogue writes both where cuBLASLt has an algorithm (out % 8 == 0);
// otherwise linear_forward then the gelu kernel.
DL_CUDA_ENTRY(std::vector<Tensor> linear_gelu_forward(const Tensor& x, const Tensor& weight,
                                                      const Tensor& bias))
// A Linear's parameter gradients added straight into f32 storage: dw (out, in) += dy^T x and,
// when db is defined, db (out) += the column sums of dy (a deterministic column-sum kernel
// that adds in place, launch_bias_grad). dy (N, out) and x (N, in) are
// contiguous and share a dtype (f32 or bf16); dw and db are contiguous f32.
DL_CUDA_ENTRY(void linear_param_grads(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                      const Tensor& db))
// dpre (N, in) = (dy w) * gelu_tanh'(pre), the input gradient of a Linear (w (out, in))
// whose input was gelu(pre), as one bf16 GEMM with the DGELU epilogue; undefined when that
// is not available (not bf16, in % 8 != 0, or cuBLASLt has no algorithm), for the caller's
// unfused path. pre is the pre-activation linear_gelu_forward returned.
DL_CUDA_ENTRY(Tensor linear_dgelu_input_grad(const Tensor& dy, const Tensor& w, const Tensor& pre))

// ---- elementwise.cpp, activation.cpp (elementwise.cu) ----
enum class Binary { add, sub, mul };
// a, b broadcast to out_shape (any strides).
Tensor binary(Binary kind, const Tensor& a, const Tensor& b, const Shape& out_shape);
enum class Unary { copy, scale, add_scalar, neg, gelu };
// x broadcast to out_shape (copy is broadcast_to); s is the scalar of scale/add_scalar.
Tensor unary(Unary kind, const Tensor& x, const Shape& out_shape, double s = 0);
Tensor gelu_backward(const Tensor& g, const Tensor& x);

// ---- reduce.cpp (reduce.cu) ----
// Sums x down to `shape` (a numpy broadcast source of x's shape), times factor.
Tensor sum_to(const Tensor& x, const Shape& shape, double factor = 1.0);

// ---- loss.cpp (softmax.cu) ----
// logits (N, V) contiguous, targets (N) i64 on cuda, mask (N) or undefined.
// Returns {loss (), lse (N) f32/f64}.
// With row_loss_into (as in cross_entropy_forward_backward) the per-row losses go there and
// the loss comes back undefined.
std::vector<Tensor> cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                          const Tensor& mask,
                                          const Tensor& row_loss_into = Tensor());
// {dlogits, dmask or undefined}; go is the () upstream gradient. dlogits have the logits'
// row stride and grad_dtype (default the logits' dtype; bf16 from f32 logits writes the
// operand of a bf16 GEMM directly, without an f32 pass).
std::vector<Tensor> cross_entropy_backward(const Tensor& go, const Tensor& logits,
                                           const Tensor& lse, const Tensor& targets,
                                           const Tensor& mask, bool want_mask,
                                           std::optional<DType> grad_dtype = std::nullopt);

// Both at once: {loss (), dlogits} as cross_entropy_forward and cross_entropy_backward
// (without dmask) would give them, the logits read in one kernel instead of two. dlogits
// go into `into` when it is defined: (N, V) of grad_dtype with the logits' row stride (a
// slice of a caller's larger buffer), which is then what is returned. With row_loss_into
// ((N) of the accumulation dtype) the masked per-row losses go there and the loss is not
// summed (returned undefined): a caller with many chunks sums all rows once.
std::vector<Tensor> cross_entropy_forward_backward(const Tensor& go, const Tensor& logits,
                                                   const Tensor& targets, const Tensor& mask,
                                                   std::optional<DType> grad_dtype = std::nullopt,
                                                   const Tensor& into = Tensor(),
                                                   const Tensor& row_loss_into = Tensor());

// ---- elementwise.cpp (elementwise.cu) ----
// dst += src * scale (dst f32) or dst = bf16(src * scale) (dst bf16): src and dst contiguous
// of one numel, src f32, scale a one-element f32 cuda tensor (an upstream gradient, read on
// the device: no sync). The product is rounded before the add, as mul then add would round.
void scaled_into(const Tensor& src, const Tensor& scale, const Tensor& dst);

}  // namespace driftless::ops::gpu
