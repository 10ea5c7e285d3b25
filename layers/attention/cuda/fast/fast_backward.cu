// Backward of the fast attention (fast_attention.h), FlashAttention-2 style and without
// atomics, so every gradient element is summed by one thread in a fixed order:
//   delta_kernel  delta = rowsum(dO * O) per (q row, head), on tensor cores (see there), for
//                 the mma.sync kernels; the wgmma dq_kernel computes it itself and writes it;
//   dkv_kernel    one CTA per (64-key tile of a document, kv head); each of its 4 warps owns
//                 16 keys, computes S^T and dP^T for every query head of the GQA group and
//                 every 64-row query tile that sees the keys, and accumulates dV += P^T dO,
//                 dK += dS^T Q in registers (the group's reduction happens in the CTA);
//   dq_kernel     one CTA per (query tile of DqRows<D> rows, head), 16 rows a warp,
//                 recomputing P over the visible key tiles: dQ += dS K. Runs before dkv_kernel,
//                 which reads the delta it wrote.
// The products run as mma.sync per warp, or (W, sm_90a) as wgmma per warpgroup of 4 warps,
// whose accumulator rows per warp are the same 16, in two software-pipelined halves per step.
// dS = P * (dP - delta) * d value / d score; the softmax scale is applied once at the end.
// dQ = dS K takes dS as a bf16 head plus tail (two products): dS of a row sums to ~0, so
// dQ is a cancelling sum and one bf16 rounding of dS alone put its error at ~2x the CPU's.
#include <type_traits>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/launch.cuh"
#include "layers/attention/cuda/fast/fast_common.cuh"
#include "layers/attention/cuda/fast/wgmma.cuh"

namespace driftless::layers::gpu::fast {
namespace {

constexpr int kBQ = kBwdBlockQ, kBK = kBwdBlockK, kThreads = 128;

// delta[h * T_q + row] = sum_d dO * O, as the diagonal of the tensor-core product dO O^T
// over 16 rows per warp: the same mma, operand positions and k order as dP = dO V^T in the
// dQ kernel, so where O equals the one visible V row (a row that sees a single key) dP and
// delta are bitwise equal and dS is exactly 0, like the CPU path's. A warp's 16 rows of dO
// and O (contiguous) come in as 16-byte loads through shared memory, rows padded by 16
// bytes so the fragment reads hit 32 different banks.
template <int D>
constexpr int kDeltaWarps = D == 64 ? 8 : 4;  // 32 KiB of staged rows per block
template <int D>
__global__ void __launch_bounds__(32 * kDeltaWarps<D>)
    delta_kernel(int64_t rows, int64_t heads, int64_t t_q, const bf16* out, const bf16* dout,
                 float* delta) {
  cuda::dependent_kernel_begin();
  constexpr int kLd = D + 8, kUnits = 16 * D / 8;  // staged row stride; 16-byte units per tile
  __shared__ __align__(16) bf16 stage[kDeltaWarps<D>][2][16 * kLd];
  const int warp = threadIdx.x / 32;
  const int64_t r0 = (blockIdx.x * int64_t(kDeltaWarps<D>) + warp) * 16;
  if (r0 >= rows) return;
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  bf16* sdo = stage[warp][0];
  bf16* so = stage[warp][1];
  for (int u = lane; u < kUnits; u += 32) {
    const int row = u / (D / 8), c8 = u % (D / 8);
    const bool in = r0 + row < rows;
    const int64_t at = (r0 + row) * D + c8 * 8;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(sdo + row * kLd + c8 * 8) =
        in ? *reinterpret_cast<const uint4*>(dout + at) : zero;
    *reinterpret_cast<uint4*>(so + row * kLd + c8 * 8) =
        in ? *reinterpret_cast<const uint4*>(out + at) : zero;
  }
  __syncwarp();
  const int64_t ra = r0 + g, rb = r0 + g + 8;  // rows of this lane (row * H + h)
  auto ld = [&](const bf16* x, int row, int col) -> uint32_t {
    return *reinterpret_cast<const uint32_t*>(x + row * kLd + col);
  };
  float c0[4] = {0.f, 0.f, 0.f, 0.f}, c1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd) {
    const int col = kd * 16 + 2 * t4;
    const uint32_t a[4] = {ld(sdo, g, col), ld(sdo, g + 8, col), ld(sdo, g, col + 8),
                           ld(sdo, g + 8, col + 8)};
    mma_bf16(c0, a, ld(so, g, col), ld(so, g, col + 8));          // O rows r0 .. r0 + 7
    mma_bf16(c1, a, ld(so, g + 8, col), ld(so, g + 8, col + 8));  // O rows r0 + 8 .. r0 + 15
  }
  // Diagonal: (g, g) sits in c0 of the lane with t4 == g / 2, (g + 8, g + 8) in c1.
  const int src = (lane & ~3) | (g >> 1);
  float d0[4], d1[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    d0[e] = __shfl_sync(0xffffffffu, c0[e], src);
    d1[e] = __shfl_sync(0xffffffffu, c1[e], src);
  }
  if (t4 == 0) {
    if (ra < rows) delta[(ra % heads) * t_q + ra / heads] = d0[g & 1];
    if (rb < rows) delta[(rb % heads) * t_q + rb / heads] = d1[2 + (g & 1)];
  }
}

// DqRows<D> query rows per CTA, 16 per warp: at D = 64, 128 rows (8 warps, two
// warpgroups) share every K/V tile load, which halves the K/V traffic that made the 64-row
// kernel memory-bound (ncu on an H100: 2.6 TB/s, 11% L2 hits), with 2 CTAs per SM at <= 128
// registers.
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
  const uint32_t sK = sdO + kRows * D * 2;   // 2 buffers of (kBK, D)
  const uint32_t sV = sK + 2 * kBK * D * 2;  // 2 buffers of (kBK, D)
  const uint32_t sO = sV + 2 * kBK * D * 2;  // (kRows, D): W only, for delta
  const int64_t H = p.heads, Hkv = p.kv_heads, QH = q_heads(p), KH = k_heads(p), VH = v_heads(p);
  const int h = int(blockIdx.x % H);
  const Tile tile = tiles[blockIdx.x / H];
  const int kh = int(h / (H / Hkv));
  const Doc doc = p.docs[tile.doc];
  const int q_len = int(doc.q_len), k_len = int(doc.k_len), i0 = tile.start;
  const int nq = min(kRows, q_len - i0);
  mod.bind(h);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;

  int lo_first, hi_first, lo_last, hi_last;
  row_keys(p, doc, i0, &lo_first, &hi_first);
  row_keys(p, doc, i0 + nq - 1, &lo_last, &hi_last);
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

  const bf16* qg = static_cast<const bf16*>(p.q) + ((doc.q_offset + i0) * QH + h) * D;
  const bf16* dog = dout + ((doc.q_offset + i0) * H + h) * D;
  const bf16* og = out + ((doc.q_offset + i0) * H + h) * D;  // O rows, laid out like dO
  const bf16* kg = static_cast<const bf16*>(p.k) + (doc.k_offset * KH + kh) * D;
  const bf16* vg = static_cast<const bf16*>(p.v) + (doc.k_offset * VH + kh) * D;
  const int j_begin = lo_first > 0 ? (lo_first / kBK) * kBK : 0;
  const int n_tiles = hi_last >= lo_first ? (hi_last - j_begin) / kBK + 1 : 0;

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
    if (n_tiles > 0)
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
      if (t + 1 < n_tiles) {
        load_kv(t + 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      if constexpr (W) fence_proxy_async();
      __syncthreads();
      const uint32_t k_s = sK + (t & 1) * kBK * D * 2, v_s = sV + (t & 1) * kBK * D * 2;
      const int j0 = j_begin + t * kBK;
      const bool full = j0 >= lo_last && j0 + kBK - 1 <= hi_first;
      // S, dP of (the warp's 16 rows) x (keys j0 + c0 ..) -> dS in dp.
      auto ds = [&](auto& s, auto& dp, int c0) {
        constexpr int N = std::extent_v<std::remove_reference_t<decltype(s)>>;
#pragma unroll
        for (int n = 0; n < N; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = e >> 1, j = j0 + c0 + n * 8 + 2 * t4 + (e & 1);
            float dx;
            const float x = mod.x_dx(s[n][e], qpos[r], j, &dx);
            float pr = exp2_ftz(x - lse2[r]);
            if (!full && (j < lo[r] || j > hi[r])) pr = 0.f;
            dp[n][e] = pr * (dp[n][e] - dl[r]) * dx;
          }
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
      __syncthreads();
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

// 3 CTAs per SM for the wgmma kernel at D = 64 (<= 168 registers): the element-wise work of
// one CTA then overlaps the products of the others (measured on an H100: backward +14%).
template <int D, class M, bool W>
__global__ void __launch_bounds__(kThreads, (W && D == 64) ? 3 : 1)
    dkv_kernel(Problem p, M mod0, const Tile* tiles, const bf16* dout, const float* lse,
               const float* delta, bf16* dk, bf16* dv, int dkv_heads) {
  cuda::dependent_kernel_begin();
  constexpr int KD = D / 16, NQ = kBQ / 8, ND = D / 8;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_smem(smem_raw);
  const uint32_t sK = smem_u32(smem);
  const uint32_t sV = sK + kBK * D * 2;
  const uint32_t sQ = sV + kBK * D * 2;       // 2 buffers of (kBQ, D)
  const uint32_t sdO = sQ + 2 * kBQ * D * 2;  // 2 buffers of (kBQ, D)
  float* sL = reinterpret_cast<float*>(smem + (2 * kBK + 4 * kBQ) * D * 2);  // 2 x kBQ
  float* sD = sL + 2 * kBQ;                                                  // 2 x kBQ
  const int64_t H = p.heads, Hkv = p.kv_heads, group = H / Hkv, QH = q_heads(p), KH = k_heads(p),
                VH = v_heads(p);
  const int kh = int(blockIdx.x % Hkv);
  const Tile tile = tiles[blockIdx.x / Hkv];
  const Doc doc = p.docs[tile.doc];
  const int q_len = int(doc.q_len), k_len = int(doc.k_len), j0 = tile.start;
  const int nk = min(kBK, k_len - j0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;

  // Query rows that may see a key of the tile (as the reference kernel; re-checked below).
  const int shift = k_len - q_len;
  int i_begin = 0, i_end = q_len - 1;
  if (p.causal) i_begin = max(i_begin, j0 - shift);
  if (p.window_right >= 0) i_begin = max(i_begin, int(j0 - p.window_right - shift));
  if (p.window_left >= 0) i_end = min(i_end, int(j0 + nk - 1 + p.window_left - shift));
  const int n_qt = i_end >= i_begin ? (i_end - i_begin) / kBQ + 1 : 0;
  const int n_steps = int(group) * n_qt;

  const bf16* kg = static_cast<const bf16*>(p.k) + ((doc.k_offset + j0) * KH + kh) * D;
  const bf16* vg = static_cast<const bf16*>(p.v) + ((doc.k_offset + j0) * VH + kh) * D;
  float dk_acc[ND][4], dv_acc[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.f;

  if (n_steps > 0) {
    load_tile<kBK, D, kThreads>(sK, kg, KH * D, nk);
    load_tile<kBK, D, kThreads>(sV, vg, VH * D, nk);
    // Step s: query head kh * group + s / n_qt, query rows i_begin + (s % n_qt) * kBQ.
    auto load_q = [&](int s) {
      const int h = int(kh * group + s / n_qt), q0 = i_begin + (s % n_qt) * kBQ, buf = s & 1;
      const int n = min(kBQ, q_len - q0);
      const int64_t off = ((doc.q_offset + q0) * H + h) * D;
      load_tile<kBQ, D, kThreads>(
          sQ + buf * kBQ * D * 2,
          static_cast<const bf16*>(p.q) + ((doc.q_offset + q0) * QH + h) * D, QH * D, n);
      load_tile<kBQ, D, kThreads>(sdO + buf * kBQ * D * 2, dout + off, H * D, n);
      // lse and delta of the rows through cp.async as well (plain loads here stalled every
      // step on their latency); zeros past the document, whose P the mask zeroes.
      for (int r = threadIdx.x; r < kBQ; r += kThreads) {
        const int64_t row = h * p.t_q + doc.q_offset + q0 + min(r, n - 1);
        cp_async4(smem_u32(sL + buf * kBQ + r), lse + row, r < n);
        cp_async4(smem_u32(sD + buf * kBQ + r), delta + row, r < n);
      }
    };
    load_q(0);
    cp_async_commit();
    const int jr[2] = {j0 + warp * 16 + g, j0 + warp * 16 + g + 8};  // this thread's keys
    for (int s = 0; s < n_steps; ++s) {
      if (s + 1 < n_steps) {
        load_q(s + 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      if constexpr (W) fence_proxy_async();
      __syncthreads();
      const int buf = s & 1, h = int(kh * group + s / n_qt), q0 = i_begin + (s % n_qt) * kBQ;
      M mod = mod0;
      mod.bind(h);
      const uint32_t q_s = sQ + buf * kBQ * D * 2, do_s = sdO + buf * kBQ * D * 2;
      const float* L = sL + buf * kBQ;
      const float* Dl = sD + buf * kBQ;
      // Every (query, key) of the step visible: no element mask.
      int lo_a, hi_a, lo_b, hi_b;
      const int q_last = min(q0 + kBQ, q_len) - 1;
      row_keys(p, doc, q0, &lo_a, &hi_a);
      row_keys(p, doc, q_last, &lo_b, &hi_b);
      const bool full =
          q0 + kBQ <= q_len && j0 + kBK <= k_len && lo_b <= j0 && hi_a >= j0 + kBK - 1;
      // S^T, dP^T of (the warp's 16 keys) x (queries c0 ..) in place -> P^T, dS^T.
      // lse (log2 units; +inf for a row that sees nothing: P = 0) and delta of this thread's
      // query columns c0 + 8n + 2 t4 (+1), read from shared memory ahead of the products they
      // follow (read at the use, their latency was the dK/dV kernel's main stall).
      auto load_ld = [&](auto& l2, auto& dl2, int c0) {
        constexpr int N = std::extent_v<std::remove_reference_t<decltype(l2)>>;
#pragma unroll
        for (int n = 0; n < N; ++n) {
          l2[n] = *reinterpret_cast<const float2*>(L + c0 + n * 8 + 2 * t4);
          dl2[n] = *reinterpret_cast<const float2*>(Dl + c0 + n * 8 + 2 * t4);
        }
      };
      auto log2_lse = [](float l) { return l == -INFINITY ? INFINITY : l * kLog2e; };
      auto p_ds = [&](auto& st, auto& dpt, int c0, const auto& l2, const auto& dl2) {
        constexpr int N = std::extent_v<std::remove_reference_t<decltype(st)>>;
#pragma unroll
        for (int n = 0; n < N; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = c0 + n * 8 + 2 * t4 + (e & 1), i = q0 + c, j = jr[e >> 1];
            float dx;
            const float x = mod.x_dx(st[n][e], i + shift, j, &dx);
            float pr = exp2_ftz(x - log2_lse((e & 1) ? l2[n].y : l2[n].x));
            if (!full) {
              int lo, hi;
              row_keys(p, doc, i, &lo, &hi);
              if (i >= q_len || j < lo || j > hi) pr = 0.f;
            }
            st[n][e] = pr;
            dpt[n][e] = pr * (dpt[n][e] - ((e & 1) ? dl2[n].y : dl2[n].x)) * dx;
          }
      };
      if constexpr (W) {
        // The warpgroup's 64 keys at once, B straight from shared memory, in two halves of
        // kBQ / 2 queries, software-pipelined: the element-wise work of one half runs while
        // the tensor cores do the other half's products (wgmma groups complete in order).
        constexpr int NH = NQ / 2, KH = kBQ / 32;  // per half: 8-query chunks, 16-query k steps
        float st[2][NH][4], dpt[2][NH][4];
        wg_fence();
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
#pragma unroll
          for (int kd = 0; kd < KD; ++kd)
            wgmma_ss<0>(st[hf], wg_desc_k<D>(sK, kd), wg_desc_k<D>(q_s, kd, hf * kBQ / 2), kd);
#pragma unroll
          for (int kd = 0; kd < KD; ++kd)
            wgmma_ss<0>(dpt[hf], wg_desc_k<D>(sV, kd), wg_desc_k<D>(do_s, kd, hf * kBQ / 2), kd);
          wg_commit();
        }
        uint32_t ap[2][KH][4], as[2][KH][4];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          float2 l2[NH], dl2[NH];
          load_ld(l2, dl2, hf * (kBQ / 2));
          wg_wait<1>();  // this half's S^T, dP^T done (the other group may still run)
          wg_hold(st[hf]);
          wg_hold(dpt[hf]);
          p_ds(st[hf], dpt[hf], hf * (kBQ / 2), l2, dl2);
#pragma unroll
          for (int kk = 0; kk < KH; ++kk) {
            c_to_a(ap[hf][kk], st[hf][2 * kk], st[hf][2 * kk + 1]);
            c_to_a(as[hf][kk], dpt[hf][2 * kk], dpt[hf][2 * kk + 1]);
          }
          wg_fence();
#pragma unroll
          for (int kk = 0; kk < KH; ++kk)
            wgmma_rs<1>(dv_acc, ap[hf][kk], wg_desc_n<D>(do_s, hf * KH + kk));
#pragma unroll
          for (int kk = 0; kk < KH; ++kk)
            wgmma_rs<1>(dk_acc, as[hf][kk], wg_desc_n<D>(q_s, hf * KH + kk));
          wg_commit();
        }
        wg_wait<0>();
        wg_hold(dv_acc);
        wg_hold(dk_acc);
      } else {
        float st[NQ][4], dpt[NQ][4];  // (16 keys of the warp, kBQ queries)
        mma_two_products<D, kBQ>(st, dpt, sK, sV, q_s, do_s, warp * 16, lane);
        float2 l2[NQ], dl2[NQ];
        load_ld(l2, dl2, 0);
        p_ds(st, dpt, 0, l2, dl2);
#pragma unroll
        for (int kk = 0; kk < kBQ / 16; ++kk) {
          uint32_t ap[4], as[4];
          c_to_a(ap, st[2 * kk], st[2 * kk + 1]);
          c_to_a(as, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
          for (int dd = 0; dd < ND / 2; ++dd) {
            uint32_t b[4];
            load_b_trans<D>(b, do_s, kk * 16, dd * 16, lane);
            mma_bf16(dv_acc[2 * dd], ap, b[0], b[1]);
            mma_bf16(dv_acc[2 * dd + 1], ap, b[2], b[3]);
            load_b_trans<D>(b, q_s, kk * 16, dd * 16, lane);
            mma_bf16(dk_acc[2 * dd], as, b[0], b[1]);
            mma_bf16(dk_acc[2 * dd + 1], as, b[2], b[3]);
          }
        }
      }
      __syncthreads();
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp * 16 + g + 8 * r;
    if (row >= nk) continue;
    const int64_t off = ((doc.k_offset + j0 + row) * dkv_heads + kh) * D;
#pragma unroll
    for (int n = 0; n < ND; ++n) {
      *reinterpret_cast<uint32_t*>(dk + off + n * 8 + 2 * t4) =
          pack_bf16(dk_acc[n][2 * r] * p.scale, dk_acc[n][2 * r + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv + off + n * 8 + 2 * t4) =
          pack_bf16(dv_acc[n][2 * r], dv_acc[n][2 * r + 1]);
    }
  }
}

template <class K>
void set_smem(K kernel, int bytes) {
  DL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int D, class M, bool W>
void launch(const Problem& p, const M& mod, const Tile* q_tiles, int n_q_tiles, const Tile* k_tiles,
            int n_k_tiles, const bf16* out, const bf16* dout, const float* lse, float* delta,
            bf16* dq, bf16* dk, bf16* dv, const OutRows& out_rows) {
  // dQ: Q, dO, 2 K and 2 V tiles, and (W: delta inside the kernel) O.
  constexpr int kSmemQ = ((W ? 3 : 2) * DqRows<D>::value + 4 * kBK) * D * 2 + kSmemAlign;
  constexpr int kSmemKV = (2 * kBK + 4 * kBQ) * D * 2 + 4 * kBQ * 4 + kSmemAlign;
  static bool configured = false;
  if (!configured) {
    set_smem(dq_kernel<D, M, W>, kSmemQ);
    set_smem(dkv_kernel<D, M, W>, kSmemKV);
    configured = true;
  }
  if constexpr (!W) {  // the wgmma dQ kernel computes delta itself
    const int64_t rows = p.t_q * p.heads;
    constexpr int kDeltaThreads = 32 * kDeltaWarps<D>;
    constexpr int64_t kDeltaRows = 16 * kDeltaWarps<D>;
    cuda::launch(delta_kernel<D>, unsigned((rows + kDeltaRows - 1) / kDeltaRows), kDeltaThreads, 0,
                 rows, p.heads, p.t_q, out, dout, delta);
    DL_CUDA_LAUNCH_CHECK();
  }
  if (n_q_tiles > 0) {
    cuda::launch(dq_kernel<D, M, W>, unsigned(int64_t(n_q_tiles) * p.heads), DqRows<D>::value * 2,
                 kSmemQ, p, mod, q_tiles, dout, out, lse, delta, dq, out_rows.dq_heads);
    DL_CUDA_LAUNCH_CHECK();
  }
  if (n_k_tiles > 0) {
    cuda::launch(dkv_kernel<D, M, W>, unsigned(int64_t(n_k_tiles) * p.kv_heads), kThreads, kSmemKV,
                 p, mod, k_tiles, dout, lse, delta, dk, dv, out_rows.dkv_heads);
    DL_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace

void backward(const Problem& problem, const Mod& mod, const Tile* q_tiles, int n_q_tiles,
              const Tile* k_tiles, int n_k_tiles, bool q_padded, bool k_padded, const void* out,
              const void* dout, const float* lse, float* delta, void* dq, void* dk, void* dv,
              OutRows rows) {
  const Problem p = with_row_strides(problem);
  if (rows.dq_heads == 0) rows.dq_heads = int(p.heads);
  if (rows.dkv_heads == 0) rows.dkv_heads = int(p.kv_heads);
  DL_CHECK(rows.dq_heads >= p.heads && rows.dkv_heads >= p.kv_heads, "attention",
           "gradient rows of " << rows.dq_heads << " / " << rows.dkv_heads << " heads cannot hold "
                               << p.heads << " / " << p.kv_heads);
  // Padded rows are zeroed first (the kernels write the rows of documents only), row by row
  // where the gradients are rows of a wider buffer.
  auto zero_rows = [](void* x, int64_t rows_n, int64_t heads, int64_t row_heads, int64_t d) {
    const size_t width = size_t(heads * d) * 2, pitch = size_t(row_heads * d) * 2;
    if (rows_n > 0 && width > 0)
      DL_CUDA_CHECK(cudaMemset2DAsync(x, pitch, 0, width, size_t(rows_n)));
  };
  if (q_padded) zero_rows(dq, p.t_q, p.heads, rows.dq_heads, p.head_dim);
  if (k_padded) {
    zero_rows(dk, p.t_k, p.kv_heads, rows.dkv_heads, p.head_dim);
    zero_rows(dv, p.t_k, p.kv_heads, rows.dkv_heads, p.head_dim);
  }
  if (p.t_q == 0 || p.heads == 0) return;
  const bool wg = use_wgmma();
  dispatch_mod(p, mod, [&](auto m) {
    auto go = [&](auto d, auto w) {
      launch<decltype(d)::value, decltype(m), decltype(w)::value>(
          p, m, q_tiles, n_q_tiles, k_tiles, n_k_tiles, static_cast<const bf16*>(out),
          static_cast<const bf16*>(dout), lse, delta, static_cast<bf16*>(dq),
          static_cast<bf16*>(dk), static_cast<bf16*>(dv), rows);
    };
    auto pick_w = [&](auto d) {
      if (wg)
        go(d, std::true_type{});
      else
        go(d, std::false_type{});
    };
    if (p.head_dim == 64)
      pick_w(std::integral_constant<int, 64>{});
    else
      pick_w(std::integral_constant<int, 128>{});
  });
}

}  // namespace driftless::layers::gpu::fast
