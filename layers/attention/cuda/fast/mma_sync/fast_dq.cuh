// The dQ kernel of the fast attention backward (fast_backward.cu, which includes this file
// once): dQ = dS K over the visible key tiles of one query tile, without atomics.
#pragma once
#include "engine/core/cuda/launch.cuh"
#include "layers/attention/rtc_std.h"
#include "layers/attention/cuda/fast/fast_common.cuh"
#include "layers/attention/cuda/fast/mma_sync/query_block.cuh"
#include "layers/attention/cuda/fast/wgmma.cuh"

namespace driftless::layers::gpu::fast::bwd {

constexpr int kBQ = kBwdBlockQ, kBK = kBwdBlockK, kThreads = 128;

// DqRows<D> query rows per CTA, 16 per warp: at D = 64, 128 rows (8 warps, two
// warpgroups) share every K/V tile load, which halves the K/V traffic that made the 64-row
// kernel memory-bound (ncu, BENCHMARKS.md), with 2 CTAs per SM at <= 128 registers.
template <int D, class M, bool W>
__global__ void __launch_bounds__(DqRows<D>::value * 2, (W && D == 64) ? 2 : 1)
    dq_kernel(Problem p, M mod, const Tile* tiles, const bf16* dout, const bf16* out,
              const float* lse, float* delta, bf16* dq, int dq_heads) {
  cuda::dependent_kernel_begin();
  constexpr int KD = D / 16, NK = kBK / 8, ND = D / 8;
  constexpr int kRows = DqRows<D>::value, kQThreads = kRows * 2;  // 16 rows (a warp) each
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_smem(smem_raw);
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sdO = sQ + kRows * D * 2;
  // K and V double-buffered (a third buffer measured the same at D = 64 and cost the second
  // CTA per SM at D = 128, a slower backward: BENCHMARKS.md).
  const uint32_t sK = sdO + kRows * D * 2;   // 2 buffers of (kBK, D)
  const uint32_t sV = sK + 2 * kBK * D * 2;  // 2 buffers of (kBK, D)
  const uint32_t sO = sV + 2 * kBK * D * 2;  // (kRows, D): W only, for delta
  const int64_t H = p.heads, QH = q_heads(p), KH = k_heads(p), VH = v_heads(p);
  const QueryBlock b = query_block<kRows, kBK, D, M>(p, tiles);
  const int h = b.h, q_len = b.q_len, k_len = b.k_len, i0 = b.i0, nq = b.nq;
  const Tile& tile = b.tile;
  const Doc& doc = b.doc;
  const int hi_first = b.hi_first, lo_last = b.lo_last;
  mod.bind(h, tile.doc);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;

  int lo[2], hi[2], qpos[2];
  float lse2[2], dl[2];
  for (int r = 0; r < 2; ++r) {
    const int row = warp * 16 + g + 8 * r;
    lo[r] = 1;
    hi[r] = 0;
    lse2[r] = INFINITY;  // P = 0 for rows that see nothing or lie past the document
    dl[r] = 0.f;
    if (row < nq) {
      row_keys(p, doc, i0 + row, &lo[r], &hi[r]);
      const int64_t qrow = doc.q_offset + i0 + row;
      const float L = lse[h * p.t_q + qrow];
      if (L != -INFINITY) lse2[r] = L * kLog2e;
      if constexpr (!W) dl[r] = delta[h * p.t_q + qrow];  // W: computed below
    }
    qpos[r] = i0 + row + k_len - q_len;
  }

  const bf16* qg = b.qg;
  const bf16* dog = dout + ((doc.q_offset + i0) * H + h) * D;
  const bf16* og = out + ((doc.q_offset + i0) * H + h) * D;  // O rows, laid out like dO
  const bf16 *kg = b.kg, *vg = b.vg;
  const int j_begin = b.j_begin, n_tiles = b.n_tiles;

  float acc[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

  auto load_kv = [&](int t) {
    const int j0 = j_begin + t * kBK, buf = t & 1;
    load_tile<kBK, D, kQThreads>(sK + buf * kBK * D * 2, kg + j0 * KH * D, KH * D, k_len - j0);
    load_tile<kBK, D, kQThreads>(sV + buf * kBK * D * 2, vg + j0 * VH * D, VH * D, k_len - j0);
  };
  if (n_tiles > 0 || W) {
    load_tile<kRows, D, kQThreads>(sQ, qg, QH * D, nq);
    load_tile<kRows, D, kQThreads>(sdO, dog, H * D, nq);
    if constexpr (W) load_tile<kRows, D, kQThreads>(sO, og, H * D, nq);
    cp_async_commit();
  }
  if (n_tiles > 0) {
    load_kv(0);
    cp_async_commit();
  }
  if constexpr (W) {
    // delta = rowsum(dO * O) of the CTA's rows, here rather than in a kernel of its own: the
    // diagonal of dO O^T by the same products as dP = dO V^T below (64 x 32 halves, the same
    // k order), so where O equals the one V row a query sees, dP == delta bit for bit and
    // dS is exactly 0. Written out for the dK/dV kernel.
    if (n_tiles > 0)  // (the first K/V tile may stay in flight)
      cp_async_wait<1>();
    else
      cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    const int r_wg = (warp >> 2) * 64, wi = warp & 3;
    float od[2][NK / 2][4];
    wg_fence();
#pragma unroll
    for (int hf = 0; hf < 2; ++hf)
#pragma unroll
      for (int kd = 0; kd < KD; ++kd)
        wgmma_ss<0>(od[hf], wg_desc_k<D>(sdO, kd, r_wg), wg_desc_k<D>(sO, kd, r_wg + hf * 32), kd);
    wg_commit();
    wg_wait<0>();
    wg_hold(od[0]);
    wg_hold(od[1]);
    // Row g of the warp's 16 (and g + 8) meets its own O row at column 16 wi + g (+ 8) of
    // the warpgroup's 64: half wi / 2, 8-column chunk 2 (wi % 2) (+ 1), held by the lane of
    // the row's quad with t4 == g / 2.
    float v0 = 0.f, v1 = 0.f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // q: the warp's wi, as selects (no indexed registers)
      const float c0 = (g & 1) ? od[q / 2][2 * (q % 2)][1] : od[q / 2][2 * (q % 2)][0];
      const float c1 = (g & 1) ? od[q / 2][2 * (q % 2) + 1][3] : od[q / 2][2 * (q % 2) + 1][2];
      v0 = wi == q ? c0 : v0;
      v1 = wi == q ? c1 : v1;
    }
    const int src = (lane & ~3) | (g >> 1);
    v0 = __shfl_sync(0xffffffffu, v0, src);
    v1 = __shfl_sync(0xffffffffu, v1, src);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + 8 * r;
      if (row >= nq) continue;
      dl[r] = r == 0 ? v0 : v1;
      if (t4 == 0) delta[h * p.t_q + doc.q_offset + i0 + row] = dl[r];
    }
  }
  if (n_tiles > 0) {
    for (int t = 0; t < n_tiles; ++t) {
      // One barrier a step (as the forward): step t's tiles have landed for every thread
      // and every warp is done with step t - 1, whose buffers the prefetch then refills.
      cp_async_wait<0>();
      if constexpr (W) fence_proxy_async();
      __syncthreads();
      if (t + 1 < n_tiles) {
        load_kv(t + 1);
        cp_async_commit();
      }
      const uint32_t k_s = sK + (t & 1) * kBK * D * 2, v_s = sV + (t & 1) * kBK * D * 2;
      const int j0 = j_begin + t * kBK;
      const bool full = j0 >= lo_last && j0 + kBK - 1 <= hi_first;
      // S, dP of (the warp's 16 rows) x (keys j0 + c0 ..) -> dS in dp; a mask expression is
      // not evaluated on a key tile inside the tile's visible range (with_visible_block).
      auto ds = [&](auto& s, auto& dp, int c0) {
        with_visible_block<M>(tile.vis_lo, tile.vis_hi, j0, kBK, [&](auto shown) {
          constexpr int N = std::extent_v<std::remove_reference_t<decltype(s)>>;
#pragma unroll
          for (int n = 0; n < N; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = e >> 1, j = j0 + c0 + n * 8 + 2 * t4 + (e & 1);
              float dx;
              float pr =
                  mod_p_dx<decltype(shown)::value>(mod, s[n][e], qpos[r], j, lse2[r], &dx);
              if (!full && (j < lo[r] || j > hi[r])) pr = 0.f;
              dp[n][e] = pr * (dp[n][e] - dl[r]) * dx;
            }
        });
      };
      if constexpr (W) {
        // Two halves of kBK / 2 keys, software-pipelined as in dkv_kernel. Warpgroup w owns
        // rows 64w .. 64w + 63.
        constexpr int NH = NK / 2, KH = kBK / 32;
        const int r_wg = (warp >> 2) * 64;
        float s[2][NH][4], dp[2][NH][4];
        wg_fence();
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
          for (int kd = 0; kd < KD; ++kd)
            wgmma_ss<0>(s[hf], wg_desc_k<D>(sQ, kd, r_wg), wg_desc_k<D>(k_s, kd, hf * kBK / 2), kd);
#pragma unroll
          for (int kd = 0; kd < KD; ++kd)
            wgmma_ss<0>(dp[hf], wg_desc_k<D>(sdO, kd, r_wg), wg_desc_k<D>(v_s, kd, hf * kBK / 2),
                        kd);
          wg_commit();
        }
        uint32_t a[2][KH][4], a_lo[2][KH][4];  // dS as bf16 head + tail (see above)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          wg_wait<1>();
          wg_hold(s[hf]);
          wg_hold(dp[hf]);
          ds(s[hf], dp[hf], hf * (kBK / 2));
#pragma unroll
          for (int kk = 0; kk < KH; ++kk)
            c_to_a_split(a[hf][kk], a_lo[hf][kk], dp[hf][2 * kk], dp[hf][2 * kk + 1]);
          wg_fence();
#pragma unroll
          for (int kk = 0; kk < KH; ++kk) {
            wgmma_rs<1>(acc, a[hf][kk], wg_desc_n<D>(k_s, hf * KH + kk));
            wgmma_rs<1>(acc, a_lo[hf][kk], wg_desc_n<D>(k_s, hf * KH + kk));
          }
          wg_commit();
        }
        wg_wait<0>();
        wg_hold(acc);
      } else {
        float s[NK][4], dp[NK][4];
        mma_two_products<D, kBK>(s, dp, sQ, sdO, k_s, v_s, warp * 16, lane);
        ds(s, dp, 0);
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          uint32_t a[4], a_lo[4];  // dS as bf16 head + tail: dq keeps f32-like accuracy
          c_to_a_split(a, a_lo, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
          for (int dd = 0; dd < ND / 2; ++dd) {
            uint32_t b[4];
            load_b_trans<D>(b, k_s, kk * 16, dd * 16, lane);
            mma_bf16(acc[2 * dd], a, b[0], b[1]);
            mma_bf16(acc[2 * dd + 1], a, b[2], b[3]);
            mma_bf16(acc[2 * dd], a_lo, b[0], b[1]);
            mma_bf16(acc[2 * dd + 1], a_lo, b[2], b[3]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp * 16 + g + 8 * r;
    if (row >= nq) continue;
    bf16* o = dq + ((doc.q_offset + i0 + row) * dq_heads + h) * D;
#pragma unroll
    for (int n = 0; n < ND; ++n)
      *reinterpret_cast<uint32_t*>(o + n * 8 + 2 * t4) =
          pack_bf16(acc[n][2 * r] * p.scale, acc[n][2 * r + 1] * p.scale);
  }
}

}  // namespace driftless::layers::gpu::fast::bwd
