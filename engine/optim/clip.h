// Global gradient-norm clipping over the flat gradient slab (ARCHITECTURE.md "Memory in a
// step"). Sums of squares accumulate in double. For a sharded slab (ZeRO-1), each rank
// computes grad_norm_squared of its part and the sums are all-reduced. The trainer does not
// scale the gradients itself: it passes clip_coefficient(sqrt(total), max_norm) to the
// optimizer, whose pass over the gradients applies it (scale_grads only when a tensor log
// records the clipped gradients).
#pragma once
#include <vector>

#include "engine/core/tensor.h"

namespace driftless::optim {

// Sum of squares of every element (f32 or f64, contiguous, cpu or cuda), in double.
double grad_norm_squared(const Tensor& grads);
// min(1, max_norm / (norm + 1e-6)) as in torch.nn.utils.clip_grad_norm_; 1 when norm is
// not finite (the caller should skip the step; scaling by NaN would poison the weights).
double clip_coefficient(double norm, double max_norm);
// grads *= factor, in place.
void scale_grads(const Tensor& grads, double factor);

// Scales grads so their global L2 norm is at most max_norm; returns the norm before
// clipping. Leaves grads unchanged when the norm is <= max_norm or not finite.
double clip_grad_norm(const Tensor& grads, double max_norm);
double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm);

}  // namespace driftless::optim
