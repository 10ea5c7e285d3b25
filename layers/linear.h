// Linear layer as one autograd node: y = x W^T + b, with W stored (out, in) as in
// nn.Linear (HF GPT-2's Conv1D stores (in, out); import/export transposes). On cuda the
// bias (and for linear_gelu the GELU) ride in the GEMM's cuBLASLt epilogue,
// and the backward adds the weight and bias gradients straight into a parameter's f32
// gradient storage (autograd::accumulating_grad), the bias gradient in the weight-gradient
// GEMM's epilogue.
#pragma once
#include "engine/core/tensor.h"

namespace driftless::layers {

// x (N, in), weight (out, in), bias (out) or undefined -> (N, out), plus residual (N, out)
// when defined: a residual connection in the same node (on cuda cuBLASLt's C operand, so
// the sum is rounded once and no separate add pass runs); its gradient is dy itself.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Tensor& residual = Tensor());

// gelu(x W^T + b) with GPT-2's tanh GELU, one node (the first half of the MLP): same
// shapes as linear. Saves x, W and the pre-activation x W^T + b, not the output.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias);

// The GPT-2 MLP, linear(linear_gelu(x, w_fc, b_fc), w_proj, b_proj). On cuda in bf16 it is
// one node whose backward applies the GELU's derivative in the epilogue of the GEMM that
// produces its input gradient (cuBLAS DGELU), instead of a separate pass over the (N, 4C)
// activation; elsewhere it is the two nodes above. Saves what those two would.
// residual: as linear's, added to the output.
Tensor mlp(const Tensor& x, const Tensor& w_fc, const Tensor& b_fc, const Tensor& w_proj,
           const Tensor& b_proj, const Tensor& residual = Tensor());

}  // namespace driftless::layers
