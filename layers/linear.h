// Linear layer as one autograd node: y = x W^T + b, with W stored (out, in) as in
// nn.Linear (HF GPT-2's Conv1D stores (in, out); import/export transposes).
#pragma once
#include "engine/core/tensor.h"

namespace driftless::layers {

// x (N, in), weight (out, in), bias (out) or undefined -> (N, out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);

}  // namespace driftless::layers
