// One query step of a dK/dV key tile, shared by the dK/dV kernels (mma_sync/fast_dkv.cuh, and the
// sm_90a warp-specialised sm90/bwd_*.cuh): which query rows a key tile's steps cover, and
// the element-wise work that turns a step's S^T and dP^T into P^T and dS^T.
#pragma once
#include "layers/attention/cuda/fast/fast_common.cuh"
#include "layers/attention/cuda/fast/param_grad.cuh"
#include "layers/attention/rtc_std.h"

namespace driftless::layers::gpu::fast::bwd {

// The query steps of the key tile `tile` (keys tile.start .. + nk - 1 of document doc): rows
// i_begin + s * kStep for s < n_qt, those that may see a key of the tile. The steps lie on a
// grid of kStep rows from the first row of the kAnchor-key tile that holds this one, so
// kernels of kAnchor-aligned tiles of any size sum a key's query rows in the same chunks
// (a step a smaller tile skips is masked whole in the larger one: exact zeros), and dk, dv
// keep the same bits across them. A mask expression narrows the steps (narrow_blocks).
struct QuerySteps {
  int i_begin, n_qt;
};
template <int kAnchor, int kStep, class M>
__device__ __forceinline__ QuerySteps query_steps(const Problem& p, const Doc& doc,
                                                  const Tile& tile, int nk) {
  const int q_len = int(doc.q_len), k_len = int(doc.k_len), j0 = tile.start;
  const int shift = k_len - q_len;
  // (windows in 32 bits as row_keys takes them: a window of 2^31 or more wrapped here)
  const int wl = window_in_32_bits(p.window_left, q_len, k_len),
            wr = window_in_32_bits(p.window_right, q_len, k_len);
  // The first query row that may see key j (never decreasing): mask.h first_visible_query,
  // written out here (the host schedule's form changed these kernels' instructions).
  auto first_row = [&](int j) {
    int i = 0;
    if (p.causal) i = max(i, j - shift);
    if (wr >= 0) i = max(i, j - wr - shift);
    return i;
  };
  const int i_anchor = first_row(j0 - j0 % kAnchor);
  QuerySteps s;
  s.i_begin = i_anchor + (first_row(j0) - i_anchor) / kStep * kStep;
  int i_end = q_len - 1;
  if (wl >= 0) i_end = min(i_end, j0 + nk - 1 + wl - shift);
  s.n_qt = i_end >= s.i_begin ? (i_end - s.i_begin) / kStep + 1 : 0;
  if constexpr (NarrowsTiles<M>::value) narrow_blocks(tile, kStep, &s.i_begin, &s.n_qt);
  return s;
}

// lse in log2 units (+inf for a row that sees nothing: P = 0).
__device__ __forceinline__ float log2_lse(float l) { return l == -INFINITY ? INFINITY : l * kLog2e; }

// lse and delta of a thread's query columns c0 + 8n + 2 t4 (+1) from a step's rows in shared
// memory (L, Dl), read ahead of the products they follow (read at the use, their latency
// was the dK/dV kernel's main stall).
template <int N>
__device__ __forceinline__ void load_lse_delta(float2 (&l2)[N], float2 (&dl2)[N], const float* L,
                                               const float* Dl, int c0, int t4) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
    l2[n] = *reinterpret_cast<const float2*>(L + c0 + n * 8 + 2 * t4);
    dl2[n] = *reinterpret_cast<const float2*>(Dl + c0 + n * 8 + 2 * t4);
  }
}

// S^T, dP^T of a thread's (key jr[e / 2], query column c0 + 8n + 2 t4 + e % 2) elements of the
// step of rows q0 .. q0 + kStep - 1, in place -> P^T, dS^T (dS = P (dP - delta) dx, the
// softmax scale applied by the caller). full: every pair of the step visible (no element
// mask). A modifier with learnable tables also sums d loss / d entry into pg. A mask
// expression is not evaluated on a step inside the tile's visible range (with_visible_block).
template <int kStep, class M, int N, class Acc>
__device__ __forceinline__ void p_ds(const Problem& p, const Doc& doc, const Tile& tile, const M& mod,
                                     bool full, int q0, int c0, int t4, const int (&jr)[2],
                                     float (&st)[N][4], float (&dpt)[N][4], const float2 (&l2)[N],
                                     const float2 (&dl2)[N], Acc& pg) {
  const int q_len = int(doc.q_len), shift = int(doc.k_len) - q_len;
  // Two bodies, with and without the element mask, a uniform branch between them: with a
  // run-time `full` inside the loop the compiler evaluated every element's mask test on
  // every step ahead of the branch (two hundred instructions a step).
  auto body = [&](auto shown, auto masked) {
    constexpr bool kShown = decltype(shown)::value, kMasked = decltype(masked)::value;
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = c0 + n * 8 + 2 * t4 + (e & 1), i = q0 + c, j = jr[e >> 1];
        float dx;
        const float dot = st[n][e];
        const float l = log2_lse((e & 1) ? l2[n].y : l2[n].x);
        float pr = mod_p_dx<kShown>(mod, dot, i + shift, j, l, &dx);
        if constexpr (kMasked) {
          int lo, hi;
          row_keys(p, doc, i, &lo, &hi);
          if (i >= q_len || j < lo || j > hi) pr = 0.f;
        }
        st[n][e] = pr;
        if constexpr (HasParamGrad<M>::value) {
          const float ds = pr * (dpt[n][e] - ((e & 1) ? dl2[n].y : dl2[n].x));
          mod_param_grad<kShown>(mod, ds, dot, i + shift, j, pg);
          dpt[n][e] = ds * dx;
        } else {
          dpt[n][e] = pr * (dpt[n][e] - ((e & 1) ? dl2[n].y : dl2[n].x)) * dx;
        }
      }
  };
  with_visible_block<M>(tile.vis_lo, tile.vis_hi, q0, kStep, [&](auto shown) {
    if (full)
      body(shown, BoolTag<false>{});
    else
      body(shown, BoolTag<true>{});
  });
}

// Whether every (query, key) pair of the step (rows q0 .. q0 + kStep - 1, keys j0 .. j0 +
// n_keys - 1) is visible: no element mask.
template <int kStep>
__device__ __forceinline__ bool step_full(const Problem& p, const Doc& doc, int q0, int j0,
                                          int n_keys) {
  const int q_len = int(doc.q_len), k_len = int(doc.k_len);
  int lo_a, hi_a, lo_b, hi_b;
  const int q_last = min(q0 + kStep, q_len) - 1;
  row_keys(p, doc, q0, &lo_a, &hi_a);
  row_keys(p, doc, q_last, &lo_b, &hi_b);
  return q0 + kStep <= q_len && j0 + n_keys <= k_len && lo_b <= j0 && hi_a >= j0 + n_keys - 1;
}

// A thread's dS^T values of one 16-query k step (keys kr and kr + 8 of the tile, query
// columns c, c + 1 and c + 8, c + 9 as the bf16 pairs of a[]) into the shared (keys x kStep
// queries) tile that dQ = dS K reads as its M-major A operand (tile_addr<kStep>).
template <int kStep>
__device__ __forceinline__ void store_ds_t(uint32_t tile, int kr, int c, int t4,
                                           const uint32_t (&a)[4]) {
  const uint32_t at = 4 * t4;
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile_addr<kStep>(tile, kr, c >> 3) + at),
               "r"(a[0]));
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile_addr<kStep>(tile, kr + 8, c >> 3) + at),
               "r"(a[1]));
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile_addr<kStep>(tile, kr, (c >> 3) + 1) + at),
               "r"(a[2]));
  asm volatile(
      "st.shared.b32 [%0], %1;\n" ::"r"(tile_addr<kStep>(tile, kr + 8, (c >> 3) + 1) + at),
      "r"(a[3]));
}

// dK (times the softmax scale) and dV of a thread's keys kr and kr + 8 of the key tile at
// j0 (those inside the tile's nk keys), as bf16 rows of dkv_heads heads, kv head kh.
template <int D>
__device__ __forceinline__ void store_dkv(const Problem& p, const Doc& doc, int j0, int kh, int nk,
                                          int kr, int t4, const float (&dk_acc)[D / 8][4],
                                          const float (&dv_acc)[D / 8][4], bf16* dk, bf16* dv,
                                          int dkv_heads) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = kr + 8 * r;
    if (row >= nk) continue;
    const int64_t off = ((doc.k_offset + j0 + row) * dkv_heads + kh) * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dk + off + n * 8 + 2 * t4) =
          pack_bf16(dk_acc[n][2 * r] * p.scale, dk_acc[n][2 * r + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv + off + n * 8 + 2 * t4) =
          pack_bf16(dv_acc[n][2 * r], dv_acc[n][2 * r + 1]);
    }
  }
}

}  // namespace driftless::layers::gpu::fast::bwd
