// Linear layer as one autograd node: y = x W^T + b, with W stored (out, in) as in
// nn.Linear (HF GPT-2's Conv1D stores (in, out); import/export transposes). On cuda the
// bias (and for linear_gelu the GELU) ride in the GEMM's cuBLASLt epilogue (issue 8 item 2).
#pragma once
#include "engine/core/tensor.h"

namespace driftless::layers {

// x (N, in), weight (out, in), bias (out) or undefined -> (N, out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

// gelu(x W^T + b) with GPT-2's tanh GELU, one node (the first half of the MLP): same
// shapes as linear. Saves x, W and the pre-activation x W^T + b, not the output.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias);

}  // namespace driftless::layers
