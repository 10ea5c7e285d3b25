// CUDA body of the AdamW update (engine/optim/adamw_kernel.h). The kernel lives here
// because driftless_optim compiles no CUDA sources; it does the CPU body's f32 operations
// in the same order with explicit round-to-nearest intrinsics, so nvcc cannot contract
// them into FMAs and the two backends agree bit for bit.
#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"
#include "engine/optim/adamw_kernel.h"

namespace driftless::optim {
namespace {

using ops::gpu::pack_bf16x2;

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

__device__ __forceinline__ void adamw_one(const AdamWKernelArgs& a, float decay, int64_t i) {
  float m = a.m[i], v = a.v[i];
  const float p = adamw_element(a, decay, a.params[i], a.grads[i], m, v);
  a.m[i] = m;
  a.v[i] = v;
  a.params[i] = p;
  if (a.compute) a.compute[i] = bf16_bits(p);
}

__device__ __forceinline__ void adamw_quad(const AdamWKernelArgs& a, float decay, float4& p,
                                           const float4& g, float4& m, float4& v) {
  p.x = adamw_element(a, decay, p.x, g.x, m.x, v.x);
  p.y = adamw_element(a, decay, p.y, g.y, m.y, v.y);
  p.z = adamw_element(a, decay, p.z, g.z, m.z, v.z);
  p.w = adamw_element(a, decay, p.w, g.w, m.w, v.w);
}

// Elements [8 o, 8 o + 8): 16-byte loads and stores (all loads first), one 16-byte store of
// the bf16 copy.
__device__ __forceinline__ void adamw_oct(const AdamWKernelArgs& a, float decay, int64_t o) {
  const int64_t q = 2 * o;
  const float4* P = reinterpret_cast<const float4*>(a.params) + q;
  const float4* G = reinterpret_cast<const float4*>(a.grads) + q;
  const float4* M = reinterpret_cast<const float4*>(a.m) + q;
  const float4* V = reinterpret_cast<const float4*>(a.v) + q;
  float4 p0 = P[0], p1 = P[1], m0 = M[0], m1 = M[1], v0 = V[0], v1 = V[1];
  const float4 g0 = G[0], g1 = G[1];
  adamw_quad(a, decay, p0, g0, m0, v0);
  adamw_quad(a, decay, p1, g1, m1, v1);
  float4* Po = reinterpret_cast<float4*>(a.params) + q;
  float4* Mo = reinterpret_cast<float4*>(a.m) + q;
  float4* Vo = reinterpret_cast<float4*>(a.v) + q;
  Po[0] = p0, Po[1] = p1, Mo[0] = m0, Mo[1] = m1, Vo[0] = v0, Vo[1] = v1;
  if (a.compute)
    reinterpret_cast<uint4*>(a.compute)[o] =
        make_uint4(pack_bf16x2(p0.x, p0.y), pack_bf16x2(p0.z, p0.w), pack_bf16x2(p1.x, p1.y),
                   pack_bf16x2(p1.z, p1.w));
}

// Block b takes chunk b: kAdamWChunk elements of the run whose chunks hold it (a binary
// search of the run table), eight per thread: 16-byte accesses where the eight are aligned
// and inside the run (vec: the arrays themselves are), else one at a time.
__global__ void __launch_bounds__(kAdamWChunk / 8)
    adamw_runs_kernel(AdamWKernelArgs a, float decay_on, const AdamWRun* runs, int64_t n_runs,
                      bool vec) {
  cuda::dependent_kernel_begin();
  const int64_t c = blockIdx.x;
  int64_t lo = 0, hi = n_runs - 1;  // the last run with chunk_begin <= c
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (runs[mid].chunk_begin <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  const AdamWRun r = runs[lo];
  const float decay = r.decay ? decay_on : 1.0f;  // 1 - lr * 0, as the CPU body computes it
  const int64_t end = r.offset + r.n;
  const int64_t i0 = r.offset + (c - r.chunk_begin) * kAdamWChunk + 8 * int64_t(threadIdx.x);
  if (i0 >= end) return;
  if (vec && i0 % 8 == 0 && i0 + 8 <= end) return adamw_oct(a, decay, i0 / 8);
  for (int64_t i = i0; i < end && i < i0 + 8; ++i) adamw_one(a, decay, i);
}

bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

}  // namespace

void adamw_update_cuda(const AdamWKernelArgs& args, const AdamWRun* runs, int64_t n_runs,
                       int64_t chunks) {
  if (n_runs == 0 || chunks == 0) return;
  const float decay_on = 1.0f - args.lr * args.weight_decay;  // as the CPU body, on the host
  const bool vec = aligned(args.params, 16) && aligned(args.grads, 16) && aligned(args.m, 16) &&
                   aligned(args.v, 16) && (!args.compute || aligned(args.compute, 16));
  DL_CHECK(chunks < (int64_t(1) << 31), "adamw",
           "too many elements for one launch: " << chunks << " chunks");
  cuda::launch(adamw_runs_kernel, unsigned(chunks), kAdamWChunk / 8, 0, args, decay_on, runs,
               n_runs, vec);
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace driftless::optim
