// The elementwise AdamW update on the runs of the parameter slab, and its backends. AdamW
// (adamw.h) calls adamw_update() with its runs of elements that share a decay flag; that
// function is the single place that picks the CPU or the CUDA body.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/ops/cuda/entry.h"

namespace driftless {
class Tensor;
}

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

// A run of the shard with one decay flag: elements [offset, offset + n) of the arrays of an
// AdamWKernelArgs whose pointers are at shard element 0, with its weight decay when decay is
// nonzero (else none). chunk_begin: the run's first block of the cuda launch, whose blocks
// take kAdamWChunk elements each, the runs' chunks laid end to end.
struct AdamWRun {
  int64_t offset = 0, n = 0, chunk_begin = 0, decay = 0;
};
constexpr int64_t kAdamWChunk = 2048;  // 256 threads x 8 elements

// Dispatch point: updates every run, args' pointers at shard element 0 (args.n unused;
// args.weight_decay is the decayed runs'). cpu: the runs one after another; cuda: one launch
// over all of them (a GPT-2 has ~100 runs, most of a few hundred elements: one launch each
// cost more than the update), reading `device_runs`, the same runs on the device as i64 x 4
// each. cuda throws in a build without CUDA.
void adamw_update(Device device, const AdamWKernelArgs& args, const std::vector<AdamWRun>& runs,
                  const Tensor& device_runs);
// One run of args.n elements at args' pointers, with args.weight_decay.
void adamw_update_cpu(const AdamWKernelArgs& args);
// Same f32 operations in the same order, so both backends agree bit for bit. Defined in
// engine/ops/cuda/optim.cu (driftless_optim compiles no CUDA sources).
// runs: n_runs AdamWRun on the device; chunks: their chunks in all.
DL_CUDA_ENTRY(void adamw_update_cuda(const AdamWKernelArgs& args, const AdamWRun* runs,
                                     int64_t n_runs, int64_t chunks))

}  // namespace driftless::optim
