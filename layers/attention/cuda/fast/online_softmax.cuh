// The online softmax's row update, one place for the forward kernels (mma_sync/forward_kernel.cuh,
// sm90/fwd_softmax.cuh): a thread's elements of row r of an mma fragment (columns 2 t4, +1 of
// each 8-column chunk, rows g and g + 8 as r = 0, 1) turn into unnormalised probabilities
// (log2 domain), the running row maximum and sum are updated, and the factor O must be
// rescaled by is returned. The four threads of a row (t4) combine their maxima by shuffles.
#pragma once
#include "layers/attention/cuda/fast/fast_common.cuh"

namespace driftless::layers::gpu::fast {

// The score scale of the kLin path (ModNone with a positive scale: the row maximum is taken
// over the raw products and scaled once, and each probability is exp2(dot * scale - max), one
// FFMA an element); 1 elsewhere (the modifier scaled the scores already).
template <bool kLin, class M>
__device__ __forceinline__ float lin_scale_log2(const M& mod) {
  if constexpr (kLin)
    return mod.scale_log2;
  else
    return 1.f;
}

template <bool kLin, int NK>
__device__ __forceinline__ float online_softmax_row(float (&s)[NK][4], int r, float& row_max,
                                                    float& row_sum, float scale_log2) {
  // Row max and sum as trees over the thread's elements, not chains: a chain of NK
  // dependent instructions stalls the warp on each one's latency.
  float mx = tree_reduce<NK>([&](int n) { return fmaxf(s[n][2 * r], s[n][2 * r + 1]); },
                             [](float a, float b) { return fmaxf(a, b); });
  if constexpr (!kLin) mx = fmaxf(mx, row_max);
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  float scale = 1.f;
  if constexpr (kLin) {
    scale = scale_log2;
    mx = fmaxf(row_max, mx * scale);
  }
  const float m_use = mx == -INFINITY ? 0.f : mx;
  const float corr = exp2_ftz(row_max - m_use);
  row_max = mx;
#pragma unroll
  for (int n = 0; n < NK; ++n) {
    s[n][2 * r] = exp2_ftz(fmaf(s[n][2 * r], scale, -m_use));
    s[n][2 * r + 1] = exp2_ftz(fmaf(s[n][2 * r + 1], scale, -m_use));
  }
  const float sum = tree_reduce<NK>([&](int n) { return s[n][2 * r] + s[n][2 * r + 1]; },
                                    [](float a, float b) { return a + b; });
  row_sum = row_sum * corr + sum;
  return corr;
}

}  // namespace driftless::layers::gpu::fast
