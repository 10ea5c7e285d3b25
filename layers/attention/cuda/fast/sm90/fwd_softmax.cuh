// Online softmax of the sm_90a attention forward over one consumer thread's two rows (row g
// and g + 8 of its warp's 16, in the mma fragment layout): mask and modifier applied to a
// tile's scores, which become unnormalised probabilities (log2 domain), and the running row
// maximum and sum updated, with the factor O must be rescaled by.
#pragma once
#include "layers/attention/cuda/fast/fast_common.cuh"
#include "layers/attention/cuda/fast/online_softmax.cuh"
#include "layers/attention/cuda/fast/sm90/tile_scheduler.cuh"

namespace driftless::layers::gpu::fast::sm90 {

// kLin: ModNone with a positive scale (online_softmax.cuh lin_scale_log2).
template <class M, bool kLin>
struct OnlineSoftmax {
  M mod;
  int lo0, lo1, hi0, hi1, qpos0, qpos1;  // rows g and g + 8: visible keys, position
  int t4;                                // the thread's column pair in an 8-column chunk

  // The tile at key j0: masked only where it cuts some row's visible range (a warp-uniform
  // branch between two bodies; one predicated body issued the mask's compares on every tile),
  // and a mask expression evaluated only outside the item's visible range (with_visible_block:
  // two more bodies, for mask expressions only).
  template <int kBlockN>
  __device__ __forceinline__ void tile(const ItemInfo& b, float (&s)[kBlockN / 8][4], int j0,
                                       float (&row_max)[2], float (&row_sum)[2],
                                       float (&corr)[2]) const {
    with_visible_block<M>(b.vis_lo, b.vis_hi, j0, kBlockN, [&](auto shown) {
      constexpr bool kShown = decltype(shown)::value;
      if (b.whole<kBlockN>(j0))
        apply<false, kShown, kBlockN / 8>(s, j0, row_max, row_sum, corr);
      else
        apply<true, kShown, kBlockN / 8>(s, j0, row_max, row_sum, corr);
    });
  }

  // kShown: the mask expression shows every pair of the tile (no mask evaluation).
  template <bool kMask, bool kShown, int NK>
  __device__ __forceinline__ void apply(float (&s)[NK][4], int j0, float (&row_max)[2],
                                        float (&row_sum)[2], float (&corr)[2]) const {
#pragma unroll
    for (int n = 0; n < NK; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, j = j0 + n * 8 + 2 * t4 + (e & 1);
        float x = s[n][e];
        if constexpr (!kLin) x = mod_x<kShown>(mod, x, r ? qpos1 : qpos0, j);
        if constexpr (kMask) {
          if (j < (r ? lo1 : lo0) || j > (r ? hi1 : hi0)) x = -INFINITY;
        }
        s[n][e] = x;
      }
#pragma unroll
    for (int r = 0; r < 2; ++r)
      corr[r] = online_softmax_row<kLin>(s, r, row_max[r], row_sum[r], lin_scale_log2<kLin>(mod));
  }
};

}  // namespace driftless::layers::gpu::fast::sm90
