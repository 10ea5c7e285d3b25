// The mma.sync forward kernel of the fast attention (fast_forward.cu launches it; see there
// for the algorithm), as a device-only header: nvcc instantiates it for the built-in
// modifiers, NVRTC (layers/attention/jit/) for a user expression's ModExpr.
#pragma once
#include "engine/core/cuda/launch.cuh"
#include "layers/attention/cuda/fast/fast_common.cuh"
#include "layers/attention/cuda/fast/mma_sync/query_block.cuh"
#include "layers/attention/cuda/fast/online_softmax.cuh"
#include "layers/attention/rtc_std.h"

namespace driftless::layers::gpu::fast::fwd {

constexpr int kBQ = kFwdBlockQ;

// Tile shape per head dim and modifier: kMT 16-row m-tiles per warp share every K and V
// fragment read from shared memory (2 halves that traffic per product). Keys per tile: 32 at
// D = 128 with 2 m-tiles keep the scores (kMT x kBK / 2 floats a thread) small enough for O
// (kMT x D / 2) to stay in registers. Softcap (and any HeavyMod) keeps 1 m-tile of 16 rows and
// 8 warps: its tanh needs the registers (BENCHMARKS.md).
template <int D, class M>
struct Cfg {
  static constexpr int kMT = HeavyMod<M>::value ? 1 : 2;
  static constexpr int kWarps = kBQ / (16 * kMT), kThreads = kWarps * 32;
  static constexpr int kBK = D <= 64 || kMT == 1 ? 64 : 32;
  static constexpr int kSmem = (kBQ + 4 * kBK) * D * 2 + kSmemAlign;  // Q, then K and V x 2
};

// The modifier and the element mask on the scores of one m-tile at keys j0 .. (the thread's
// rows r = 0, 1: positions qpos, visible keys lo .. hi; full: every row sees every key):
// unnormalised log2 scores, -inf where masked. kShown: the mask expression shows every pair
// of the tile (block_shown), so it is not evaluated. A mask expression's kernels only.
template <bool kShown, bool kLin, int NK, class M>
__device__ __forceinline__ void mod_scores(const M& mod, float (&sm)[NK][4], int j0, int t4,
                                           const int (&qpos)[2], const int (&lo)[2],
                                           const int (&hi)[2], bool full) {
#pragma unroll
  for (int n = 0; n < NK; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1, j = j0 + n * 8 + 2 * t4 + (e & 1);
      float x = sm[n][e];
      if constexpr (!kLin) x = mod_x<kShown>(mod, x, qpos[r], j);
      if (!full && (j < lo[r] || j > hi[r])) x = -INFINITY;
      sm[n][e] = x;
    }
}

// kLin: ModNone with a positive scale (see softmax below).
template <int D, class M, bool kLin>
__global__ void __launch_bounds__(Cfg<D, M>::kThreads)
    forward_kernel(Problem p, M mod, const Tile* tiles, bf16* out, float* lse) {
  cuda::dependent_kernel_begin();
  using C = Cfg<D, M>;
  constexpr int kMT = C::kMT, kThreads = C::kThreads, kBK = C::kBK;
  constexpr int KD = D / 16, NK = kBK / 8, ND = D / 8;
  // Q fragments stay in registers at D = 64 (or with one m-tile); at D = 128 with two they
  // would not fit beside O.
  constexpr bool kQInRegs = D <= 64 || kMT == 1;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_smem(smem_raw);
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + kBQ * D * 2;      // 2 buffers of (kBK, D)
  const uint32_t sV = sK + 2 * kBK * D * 2;  // 2 buffers of (kBK, D)
  const int64_t H = p.heads, QH = q_heads(p), KH = k_heads(p), VH = v_heads(p);
  const QueryBlock b = query_block<kBQ, kBK, D, M>(p, tiles);
  const int h = b.h, q_len = b.q_len, k_len = b.k_len, i0 = b.i0, nq = b.nq;
  const Tile& tile = b.tile;
  const Doc& doc = b.doc;
  const int hi_first = b.hi_first, lo_last = b.lo_last;
  mod.bind(h, tile.doc);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  // First row of m-tile mt of this warp (the warp's kMT m-tiles are adjacent).
  auto row_of = [&](int mt) { return warp * 16 * kMT + mt * 16; };

  int lo[kMT][2], hi[kMT][2], qpos[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_of(mt) + g + 8 * r;
      lo[mt][r] = 1;
      hi[mt][r] = 0;
      if (row < nq) row_keys(p, doc, i0 + row, &lo[mt][r], &hi[mt][r]);
      qpos[mt][r] = i0 + row + k_len - q_len;
    }

  const bf16 *qg = b.qg, *kg = b.kg, *vg = b.vg;
  const int j_begin = b.j_begin, n_tiles = b.n_tiles;

  float o[kMT][ND][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int n = 0; n < ND; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
  float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) row_max[mt][r] = -INFINITY, row_sum[mt][r] = 0.f;

  if (n_tiles > 0) {
    load_tile<kBQ, D, kThreads>(sQ, qg, QH * D, nq);
    auto load_kv = [&](int t) {
      const int j0 = j_begin + t * kBK, buf = t & 1;
      load_tile<kBK, D, kThreads>(sK + buf * kBK * D * 2, kg + j0 * KH * D, KH * D, k_len - j0);
      load_tile<kBK, D, kThreads>(sV + buf * kBK * D * 2, vg + j0 * VH * D, VH * D, k_len - j0);
    };
    load_kv(0);
    cp_async_commit();
    uint32_t qf[kMT][kQInRegs ? KD : 1][4];  // (unused without kQInRegs)
    for (int t = 0; t < n_tiles; ++t) {
      // One barrier a tile: tile t has landed for every thread, and every warp is done with
      // tile t - 1, whose buffer the prefetch of tile t + 1 then refills (a second barrier at
      // a tile's end was a large share of the warps' stalls, BENCHMARKS.md).
      cp_async_wait<0>();
      __syncthreads();
      if (t + 1 < n_tiles) {
        load_kv(t + 1);
        cp_async_commit();
      }
      if constexpr (kQInRegs) {
        if (t == 0) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int kd = 0; kd < KD; ++kd) load_a<D>(qf[mt][kd], sQ, row_of(mt), kd, lane);
        }
      }
      const uint32_t k_s = sK + (t & 1) * kBK * D * 2, v_s = sV + (t & 1) * kBK * D * 2;
      const int j0 = j_begin + t * kBK;
      // Whole tile visible to every row of the CTA: no element mask.
      const bool full = j0 >= lo_last && j0 + kBK - 1 <= hi_first;
      // Mask and online softmax of m-tile mt: scores -> unnormalized P; O and the row
      // statistics rescaled.
      // kLin (no modifier, positive scale): the row maximum is taken over the raw products
      // and scaled once, and each probability is exp2(dot * scale - max) by one FFMA, one
      // multiply an element fewer (the kernel issues about as many instructions as its
      // products take cycles). O is rescaled only where a row's maximum moved.
      // A mask expression's kernels apply the modifier and the element mask before
      // (mod_scores); the built-ins' here, as they always did (the same registers).
      auto softmax = [&](int mt, float(&sm)[NK][4]) {
        if constexpr (!NarrowsTiles<M>::value) {
#pragma unroll
          for (int n = 0; n < NK; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int r = e >> 1, j = j0 + n * 8 + 2 * t4 + (e & 1);
              float x = sm[n][e];
              if constexpr (!kLin) x = mod.x(x, qpos[mt][r], j);
              if (!full && (j < lo[mt][r] || j > hi[mt][r])) x = -INFINITY;
              sm[n][e] = x;
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float corr = online_softmax_row<kLin>(sm, r, row_max[mt][r], row_sum[mt][r],
                                                      lin_scale_log2<kLin>(mod));
          if (__any_sync(0xffffffffu, corr != 1.f)) {
#pragma unroll
            for (int n = 0; n < ND; ++n) {
              o[mt][n][2 * r] *= corr;
              o[mt][n][2 * r + 1] *= corr;
            }
          }
        }
      };
      float s[kMT][NK][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int n = 0; n < NK; ++n) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.f;
#pragma unroll
      for (int kd = 0; kd < KD; ++kd) {
        uint32_t a[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          if constexpr (kQInRegs) {
#pragma unroll
            for (int e = 0; e < 4; ++e) a[mt][e] = qf[mt][kd][e];
          } else {
            load_a<D>(a[mt], sQ, row_of(mt), kd, lane);
          }
        }
#pragma unroll
        for (int np = 0; np < NK / 2; ++np) {
          uint32_t b[4];
          load_b<D>(b, k_s, np * 16, kd, lane);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma_bf16(s[mt][2 * np], a[mt], b[0], b[1]);
            mma_bf16(s[mt][2 * np + 1], a[mt], b[2], b[3]);
          }
        }
      }
      if constexpr (NarrowsTiles<M>::value) {
        // A tile inside the mask expression's visible range skips evaluating the mask (a
        // uniform branch a tile). Not through with_visible_block: cudafe++ crashes on a
        // generic lambda holding softmax's lambdas.
        const bool shown = block_shown<M>(tile.vis_lo, tile.vis_hi, j0, kBK);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          if (shown)
            mod_scores<true, kLin>(mod, s[mt], j0, t4, qpos[mt], lo[mt], hi[mt], full);
          else
            mod_scores<false, kLin>(mod, s[mt], j0, t4, qpos[mt], lo[mt], hi[mt], full);
          softmax(mt, s[mt]);
        }
      } else {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) softmax(mt, s[mt]);
      }
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        uint32_t a[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) c_to_a(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
        for (int dp = 0; dp < ND / 2; ++dp) {
          uint32_t b[4];
          load_b_trans<D>(b, v_s, kk * 16, dp * 16, lane);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma_bf16(o[mt][2 * dp], a[mt], b[0], b[1]);
            mma_bf16(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }
  }

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[mt][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = row_of(mt) + g + 8 * r;
      if (row >= nq) continue;
      const float inv = sum > 0.f ? 1.f / sum : 0.f;
      const int64_t qrow = doc.q_offset + i0 + row;
      bf16* orow = out + (qrow * H + h) * D;
#pragma unroll
      for (int n = 0; n < ND; ++n)
        *reinterpret_cast<uint32_t*>(orow + n * 8 + 2 * t4) =
            pack_bf16(o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv);
      if (t4 == 0)
        lse[h * p.t_q + qrow] = sum > 0.f ? (row_max[mt][r] + log2f(sum)) * kLn2 : -INFINITY;
    }
}

}  // namespace driftless::layers::gpu::fast::fwd
