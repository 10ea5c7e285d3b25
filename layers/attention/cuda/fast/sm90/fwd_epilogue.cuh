// Epilogue of the sm_90a attention forward: a consumer warpgroup's O rows normalised by their
// softmax sums and stored as bf16, and their LSE (natural log) stored in f32. Rows past the
// document's end are not stored; a row that saw no key stores 0 and -inf.
#pragma once
#include "layers/attention/cuda/fast/sm90/fwd_mainloop.cuh"

namespace driftless::layers::gpu::fast::sm90 {

template <int D>
__device__ __forceinline__ void store_rows(const Problem& p, const ItemInfo& b, int cw,
                                           FwdAccum<D>& acc, bf16* out, float* lse) {
  constexpr int ND = D / 8;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t H = p.heads;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = acc.row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = cw * 64 + warp * 16 + g + 8 * r;
    if (row >= b.nq) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int64_t qrow = b.doc.q_offset + b.i0 + row;
    bf16* orow = out + (qrow * H + b.h) * D;
#pragma unroll
    for (int n = 0; n < ND; ++n)
      *reinterpret_cast<uint32_t*>(orow + n * 8 + 2 * t4) =
          pack_bf16(acc.o[n][2 * r] * inv, acc.o[n][2 * r + 1] * inv);
    if (t4 == 0)
      lse[b.h * p.t_q + qrow] = sum > 0.f ? (acc.row_max[r] + log2f(sum)) * kLn2 : -INFINITY;
  }
}

}  // namespace driftless::layers::gpu::fast::sm90
