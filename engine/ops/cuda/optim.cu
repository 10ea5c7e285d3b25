// CUDA body of the AdamW update (engine/optim/adamw_kernel.h). The kernel lives here
// because driftless_optim compiles no CUDA sources; it does the CPU body's f32 operations
// in the same order with explicit round-to-nearest intrinsics, so nvcc cannot contract
// them into FMAs and the two backends agree bit for bit.
#include "engine/ops/cuda/common.cuh"
#include "engine/optim/adamw_kernel.h"

namespace driftless::optim {
namespace {

// One element: m and v updated in place, the new parameter returned.
__device__ __forceinline__ float adamw_element(const AdamWKernelArgs& a, float decay, float p,
                                               float g_raw, float& m, float& v) {
  const float g = __fmul_rn(g_raw, a.grad_scale);
  m = __fadd_rn(__fmul_rn(a.beta1, m), __fmul_rn(a.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(a.beta2, v), __fmul_rn(__fmul_rn(a.one_minus_beta2, g), g));
  const float m_hat = __fdiv_rn(m, a.bias_correction1);
  const float v_hat = __fdiv_rn(v, a.bias_correction2);
  const float step = __fmul_rn(a.lr, __fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), a.eps)));
  return __fsub_rn(__fmul_rn(p, decay), step);
}

__device__ __forceinline__ uint16_t bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// Elements [first, n) one at a time.
__global__ void adamw_kernel(AdamWKernelArgs a, float decay, int64_t first) {
  for (int64_t i = first + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float m = a.m[i], v = a.v[i];
    const float p = adamw_element(a, decay, a.params[i], a.grads[i], m, v);
    a.m[i] = m;
    a.v[i] = v;
    a.params[i] = p;
    if (a.compute) a.compute[i] = bf16_bits(p);
  }
}

// Elements [0, 4 quads) four at a time (16-byte loads and stores; the run's arrays aligned).
__global__ void adamw_quads_kernel(AdamWKernelArgs a, float decay, int64_t quads) {
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < quads;
       q += int64_t(gridDim.x) * blockDim.x) {
    float4 p = reinterpret_cast<const float4*>(a.params)[q];
    const float4 g = reinterpret_cast<const float4*>(a.grads)[q];
    float4 m = reinterpret_cast<const float4*>(a.m)[q];
    float4 v = reinterpret_cast<const float4*>(a.v)[q];
    p.x = adamw_element(a, decay, p.x, g.x, m.x, v.x);
    p.y = adamw_element(a, decay, p.y, g.y, m.y, v.y);
    p.z = adamw_element(a, decay, p.z, g.z, m.z, v.z);
    p.w = adamw_element(a, decay, p.w, g.w, m.w, v.w);
    reinterpret_cast<float4*>(a.params)[q] = p;
    reinterpret_cast<float4*>(a.m)[q] = m;
    reinterpret_cast<float4*>(a.v)[q] = v;
    if (a.compute)
      reinterpret_cast<uint2*>(a.compute)[q] =
          make_uint2(uint32_t(bf16_bits(p.x)) | (uint32_t(bf16_bits(p.y)) << 16),
                     uint32_t(bf16_bits(p.z)) | (uint32_t(bf16_bits(p.w)) << 16));
  }
}

bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

void adamw_update_cuda(const AdamWKernelArgs& args) {
  if (args.n == 0) return;
  const float decay = 1.0f - args.lr * args.weight_decay;  // as the CPU body, on the host
  int64_t first = 0;
  if (aligned(args.params, 16) && aligned(args.grads, 16) && aligned(args.m, 16) &&
      aligned(args.v, 16) && (!args.compute || aligned(args.compute, 8))) {
    const int64_t quads = args.n / 4;
    if (quads > 0) {
      adamw_quads_kernel<<<ops::gpu::grid_for(quads, 256), 256>>>(args, decay, quads);
      DL_CUDA_LAUNCH_CHECK();
    }
    first = quads * 4;
  }
  if (first == args.n) return;
  adamw_kernel<<<ops::gpu::grid_for(args.n - first, 256), 256>>>(args, decay, first);
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace driftless::optim
