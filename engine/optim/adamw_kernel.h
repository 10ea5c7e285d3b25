// The elementwise AdamW update on one run of the parameter slab, and its backends. AdamW
// (adamw.h) calls adamw_update() once per run of elements that share a decay flag; that
// function is the single place that picks the CPU or the CUDA body.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"

namespace driftless::optim {

// Pointers to n consecutive f32 elements (all on the same device). Scalars are f32 so the
// CPU and CUDA bodies do the same arithmetic; 1 - beta and the bias corrections 1 - beta^t
// are computed in double by the caller and rounded once (so at t = 1, m / (1 - beta1^t)
// is g up to one rounding, whatever beta1).
struct AdamWKernelArgs {
  float* params = nullptr;
  const float* grads = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int64_t n = 0;
  float lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  float one_minus_beta1 = 1, one_minus_beta2 = 1;  // rounded from double, like the rest
  float bias_correction1 = 1, bias_correction2 = 1;
  // Folded into the same pass: g is read as g * grad_scale (the gradient clipping factor,
  // f32 multiply as the separate scale_grads does), and with `compute` the updated p is also
  // written there rounded to bf16 (round to nearest even: the bits Tensor::copy_ writes),
  // which saves the passes of scale_grads and ParameterSlab::sync_compute.
  float grad_scale = 1;
  uint16_t* compute = nullptr;  // bf16 bits, n elements, or null
};

// Dispatch point: runs the body for `device` (cuda throws in a build without CUDA).
void adamw_update(Device device, const AdamWKernelArgs& args);
void adamw_update_cpu(const AdamWKernelArgs& args);
// Same f32 operations in the same order, so both backends agree bit for bit. Defined in
// engine/ops/cuda/optim.cu (driftless_optim compiles no CUDA sources), CUDA builds only.
void adamw_update_cuda(const AdamWKernelArgs& args);

}  // namespace driftless::optim
