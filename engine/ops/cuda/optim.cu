// CUDA body of the AdamW update (engine/optim/adamw_kernel.h). The kernel lives here
// because driftless_optim compiles no CUDA sources; it does the CPU body's f32 operations
// in the same order with explicit round-to-nearest intrinsics, so nvcc cannot contract
// them into FMAs and the two backends agree bit for bit.
#include "engine/ops/cuda/common.cuh"
#include "engine/optim/adamw_kernel.h"

namespace driftless::optim {
namespace {

__global__ void adamw_kernel(AdamWKernelArgs a, float decay) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = __fmul_rn(a.grads[i], a.grad_scale);
    const float m = __fadd_rn(__fmul_rn(a.beta1, a.m[i]), __fmul_rn(a.one_minus_beta1, g));
    const float v =
        __fadd_rn(__fmul_rn(a.beta2, a.v[i]), __fmul_rn(__fmul_rn(a.one_minus_beta2, g), g));
    a.m[i] = m;
    a.v[i] = v;
    const float m_hat = __fdiv_rn(m, a.bias_correction1);
    const float v_hat = __fdiv_rn(v, a.bias_correction2);
    const float step = __fmul_rn(a.lr, __fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), a.eps)));
    const float p = __fsub_rn(__fmul_rn(a.params[i], decay), step);
    a.params[i] = p;
    if (a.compute) a.compute[i] = __bfloat16_as_ushort(__float2bfloat16_rn(p));
  }
}

}  // namespace

void adamw_update_cuda(const AdamWKernelArgs& args) {
  if (args.n == 0) return;
  const float decay = 1.0f - args.lr * args.weight_decay;  // as the CPU body, on the host
  adamw_kernel<<<ops::gpu::grid_for(args.n, 256), 256>>>(args, decay);
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace driftless::optim
