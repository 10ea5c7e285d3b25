// The dK/dV kernel of the fast attention backward (fast_backward.cu, which includes this
// file once): dV = P^T dO and dK = dS^T Q for one key tile, summed over its query tiles and
// the heads of its GQA group in a fixed order.
#pragma once
#include "engine/core/cuda/launch.cuh"
#include "layers/attention/cuda/fast/bwd_step.cuh"
#include "layers/attention/cuda/fast/fast_common.cuh"
#include "layers/attention/cuda/fast/mma_sync/fast_dq.cuh"
#include "layers/attention/cuda/fast/param_grad.cuh"
#include "layers/attention/cuda/fast/wgmma.cuh"
#include "layers/attention/rtc_std.h"

namespace driftless::layers::gpu::fast::bwd {

// dst[0..3] += v as one vector reduction where on is true, predicated rather than branched
// around (sm_90; compiled with the wgmma kernels only, the one place it is used).
__device__ __forceinline__ void red_add_f32x4(float* dst, float4 v, bool on) {
#ifdef DL_WGMMA
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " @p red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n}\n" ::"l"(dst),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(int(on))
      : "memory");
#endif
}

// Shared memory of dkv_kernel (byte offsets): the K and V tiles, then double-buffered
// (Q, dO, lse, delta) step buffers, then (kDq) dS^T of a step, (kBK keys, kBQ queries) bf16,
// 1024-byte aligned. A third step buffer at D = 64 (3 CTAs with kDq then fill the SM's
// 228 KB exactly) measured the same as two (BENCHMARKS.md, the attention backward on Hopper);
// at D = 128 it would cost the second CTA per SM. kWG warpgroups a CTA: kWG x kBK keys.
template <int D, bool kDq, int kWG = 1>
struct DkvSmem {
  static constexpr int kKeys = kBK * kWG;
  static constexpr int kQ = 2 * kKeys * D * 2, kDO = kQ + 2 * kBQ * D * 2;
  static constexpr int kL = kDO + 2 * kBQ * D * 2, kDl = kL + 2 * kBQ * 4;
  static constexpr int kDS = (kDl + 2 * kBQ * 4 + 1023) / 1024 * 1024;
  static constexpr int kBytes = (kDq ? kDS + kKeys * kBQ * 2 : kDl + 2 * kBQ * 4) + kSmemAlign;
  // Hopper's most dynamic shared memory a block: 227 KB (at D = 128, two warpgroups: 146 KB
  // with kDq, one CTA an SM).
  static_assert(kBytes <= 227 * 1024, "the dK/dV kernel's shared memory fits one SM");
};

// Warpgroups of a dK/dV CTA: two in the atomic mode at D = 128 on wgmma, else one. Measured
// (BENCHMARKS.md): two make the atomic backward faster, the deterministic one slower (one CTA
// of 8 warps an SM against two of 4).
// The deterministic kernel still takes the same query steps (kAnchor below), so dk and dv
// keep the same bits in both modes.
template <int D, bool W, bool kDq>
struct DkvWarpgroups {
  static constexpr int value = W && kDq && D == 128 ? 2 : 1;
};

// 3 CTAs per SM for the wgmma kernel at D = 64 (<= 168 registers): the element-wise work of
// one CTA then overlaps the products of the others (faster backward, BENCHMARKS.md).
//
// kDq (wgmma only, the non-deterministic backward): the kernel also computes dQ = dS K for
// every step and adds it to dq_acc (T_q, H, D) f32 with atomic adds, so the dQ kernel and
// its recomputation of S and dP are not needed. dS^T of the step goes through shared memory
// as bf16 (the operand dK = dS^T Q takes) and is the M-major A operand of the product. The
// order of the adds, and with it the bits of dQ, varies from run to run. dQ's product is
// issued after the second half's dS^T is stored and before that half's dV, dK products, so
// the atomics run while those products do (BENCHMARKS.md, the atomic dQ issued early). Unlike the
// dQ kernel, dS is not split into a bf16 head and tail: one bf16 rounding, as in FlashAttention's
// kernels and in the plain bf16 reference the tests' bound is made from (dq stays well within
// that bound), and the tail's 8 KB of shared memory left one CTA per SM at D = 128 (a slower
// backward, BENCHMARKS.md).
//
// kWG = 2 (wgmma only): two warpgroups, 128 keys a CTA, sharing each step's Q and dO tiles
// (half the Q and dO loads per key). With kDq each warpgroup computes dQ = dS K over all 128
// keys for half of dQ's columns, so a step adds dQ once per 128 keys instead of once per 64.
//
// A modifier with learnable tables (HasParamGrad, mod_expr.cuh) also sums each visible pair's
// d loss / d entry into its fixed-point accumulator (param_grad.cuh) in shared memory past
// DkvSmem's bytes (the launch adds them: round_up(kBytes, 16), then kGradSlotBytes a kept
// entry and one more),
// then into the call's sums; every other modifier compiles as without it.
template <int D, class M, bool W, bool kDq = false, int kWG = 1>
__global__ void __launch_bounds__(kThreads* kWG, (W && D == 64) ? 3 : 1)
    dkv_kernel(Problem p, M mod0, const Tile* tiles, const bf16* dout, const float* lse,
               const float* delta, bf16* dk, bf16* dv, int dkv_heads, float* dq_acc) {
  cuda::dependent_kernel_begin();
  static_assert(W || !kDq, "the atomic dQ runs on wgmma only");
  static_assert(kWG == 1 || (W && kWG == 2), "two warpgroups on the wgmma kernels only");
  constexpr int KD = D / 16, NQ = kBQ / 8, ND = D / 8;
  constexpr int kKeys = kBK * kWG, kT = kThreads * kWG;  // keys and threads of the CTA
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_smem(smem_raw);
  using L = DkvSmem<D, kDq, kWG>;
  const uint32_t sK = smem_u32(smem);
  const uint32_t sV = sK + kKeys * D * 2;
  const uint32_t sQ = sK + L::kQ, sdO = sK + L::kDO, sdS = sK + L::kDS;
  float* sL = reinterpret_cast<float*>(smem + L::kL);
  float* sD = reinterpret_cast<float*>(smem + L::kDl);
  const int64_t H = p.heads, Hkv = p.kv_heads, group = H / Hkv, QH = q_heads(p), KH = k_heads(p),
                VH = v_heads(p);
  // kDq: one tile a block, heads listed (k_tiles_by_head); else heads innermost.
  const Tile tile = tiles[kDq ? blockIdx.x : blockIdx.x / Hkv];
  const int kh = kDq ? tile.head : int(blockIdx.x % Hkv);
  const Doc doc = p.docs[tile.doc];
  const int q_len = int(doc.q_len), k_len = int(doc.k_len), j0 = tile.start;
  const int nk = min(kKeys, k_len - j0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int wg = kWG == 1 ? 0 : warp >> 2;  // warpgroup: keys 64 wg .. (a constant for one)

  // The query steps of the wgmma kernels on the grid of 128-key tiles (the two-warpgroup
  // kernel's at D = 128, the sm_90a kernel's, sm90/bwd_*, at both head dims), so every
  // mode sums a key's query rows in the same chunks and dk, dv keep the same bits.
  constexpr int kAnchor = W ? 2 * kBK : kKeys;
  const QuerySteps qs = query_steps<kAnchor, kBQ, M>(p, doc, tile, nk);
  const int i_begin = qs.i_begin, n_qt = qs.n_qt;
  const int n_steps = int(group) * n_qt;
  constexpr bool kPG = HasParamGrad<M>::value;
  typename GradAccOf<M>::type pg{};
  if constexpr (kPG)
    if (n_steps > 0)  // zeroed before step 0's barrier
      pg = mod0.param_grad_begin(
          reinterpret_cast<unsigned long long*>(smem_raw + (L::kBytes + 15) / 16 * 16),
          int(kh * group), int(group));

  const bf16* kg = static_cast<const bf16*>(p.k) + ((doc.k_offset + j0) * KH + kh) * D;
  const bf16* vg = static_cast<const bf16*>(p.v) + ((doc.k_offset + j0) * VH + kh) * D;
  float dk_acc[ND][4], dv_acc[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.f;

  if (n_steps > 0) {
    load_tile<kKeys, D, kT>(sK, kg, KH * D, nk);
    load_tile<kKeys, D, kT>(sV, vg, VH * D, nk);
    // Step s: query head kh * group + s / n_qt, query rows i_begin + (s % n_qt) * kBQ.
    auto load_q = [&](int s) {
      const int h = int(kh * group + s / n_qt), q0 = i_begin + (s % n_qt) * kBQ, buf = s & 1;
      const int n = min(kBQ, q_len - q0);
      const int64_t off = ((doc.q_offset + q0) * H + h) * D;
      load_tile<kBQ, D, kT>(sQ + buf * kBQ * D * 2,
                            static_cast<const bf16*>(p.q) + ((doc.q_offset + q0) * QH + h) * D,
                            QH * D, n);
      load_tile<kBQ, D, kT>(sdO + buf * kBQ * D * 2, dout + off, H * D, n);
      // lse and delta of the rows through cp.async as well (plain loads here stalled every
      // step on their latency); zeros past the document, whose P the mask zeroes.
      for (int r = threadIdx.x; r < kBQ; r += kT) {
        const int64_t row = h * p.t_q + doc.q_offset + q0 + min(r, n - 1);
        cp_async4(smem_u32(sL + buf * kBQ + r), lse + row, r < n);
        cp_async4(smem_u32(sD + buf * kBQ + r), delta + row, r < n);
      }
    };
    load_q(0);
    cp_async_commit();
    const int jr[2] = {j0 + warp * 16 + g, j0 + warp * 16 + g + 8};  // this thread's keys
    for (int s = 0; s < n_steps; ++s) {
      // One barrier a step (as the forward): step s's tiles have landed for every thread
      // and every warp is done with step s - 1, whose buffers the prefetch then refills.
      cp_async_wait<0>();
      if constexpr (W) fence_proxy_async();
      __syncthreads();
      if (s + 1 < n_steps) {
        load_q(s + 1);
        cp_async_commit();
      }
      const int buf = s & 1, h = int(kh * group + s / n_qt), q0 = i_begin + (s % n_qt) * kBQ;
      M mod = mod0;
      mod.bind(h, tile.doc);
      const uint32_t q_s = sQ + buf * kBQ * D * 2, do_s = sdO + buf * kBQ * D * 2;
      const float* L = sL + buf * kBQ;
      const float* Dl = sD + buf * kBQ;
      const bool full = step_full<kBQ>(p, doc, q0, j0, kKeys);
      auto load_ld = [&](auto& l2, auto& dl2, int c0) { load_lse_delta(l2, dl2, L, Dl, c0, t4); };
      auto p_ds = [&](auto& st, auto& dpt, int c0, const auto& l2, const auto& dl2) {
        bwd::p_ds<kBQ>(p, doc, tile, mod, full, q0, c0, t4, jr, st, dpt, l2, dl2, pg);
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
            wgmma_ss<0>(st[hf], wg_desc_k<D>(sK, kd, wg * kBK), wg_desc_k<D>(q_s, kd, hf * kBQ / 2),
                        kd);
#pragma unroll
          for (int kd = 0; kd < KD; ++kd)
            wgmma_ss<0>(dpt[hf], wg_desc_k<D>(sV, kd, wg * kBK),
                        wg_desc_k<D>(do_s, kd, hf * kBQ / 2), kd);
          wg_commit();
        }
        uint32_t ap[2][KH][4], as[2][KH][4];
        // kDq: thread's dS^T values (keys jr - j0, queries c .. c + 1) into the shared tile.
        // dQ (kBQ queries x D) = dS K over the tile's keys: A is dS^T read M-major, B the K
        // tile read N-major; with two warpgroups, warpgroup wg takes the 64-column atom wg
        // of K (1024 bytes apart in an 8-row group), so dQ's columns 64 wg ..
        constexpr int NDQ = ND / kWG;  // 8-column chunks of dQ this warpgroup computes
        static_assert(!kDq || kWG == 1 || NDQ == 8,
                      "a warpgroup's dQ columns are one 64-column atom");
        float dq[NDQ][4];
        auto dq_product = [&] {
          fence_proxy_async();
          __syncthreads();  // every warp's rows of dS^T written
          wg_fence();
#pragma unroll
          for (int kk = 0; kk < kKeys / 16; ++kk)
            wgmma_ss<1, 1>(dq, wg_desc_n<kBQ>(sdS, kk),
                           wg_desc_n<D>(sK, kk) + uint64_t(wg * (1024 >> 4)), kk);
          wg_commit();
        };
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
            if constexpr (kDq) store_ds_t<kBQ>(sdS, warp * 16 + g, hf * (kBQ / 2) + kk * 16, t4, as[hf][kk]);
          }
          if constexpr (kDq)
            if (hf == 1) dq_product();  // ahead of the second half's dV, dK products
          wg_fence();
#pragma unroll
          for (int kk = 0; kk < KH; ++kk)
            wgmma_rs<1>(dv_acc, ap[hf][kk], wg_desc_n<D>(do_s, hf * KH + kk));
#pragma unroll
          for (int kk = 0; kk < KH; ++kk)
            wgmma_rs<1>(dk_acc, as[hf][kk], wg_desc_n<D>(q_s, hf * KH + kk));
          wg_commit();
        }
        if constexpr (kDq) {
          wg_wait<1>();  // dQ's product done; the second half's dV, dK products may run on
          wg_hold(dq);
          const int nq = min(kBQ, q_len - q0);
          // Four adjacent columns a reduction (16-byte lanes: measured faster than 8-byte ones,
          // the L2 taking the adds per request; whole lines per request, by a second exchange
          // across quads, measured no faster; BENCHMARKS.md): lanes t4 and t4 ^ 1 swap halves
          // of the 8-column chunks n and n + 1, so the even lane holds columns 2 t4 .. + 3 of
          // chunk n and the odd one columns 2 (t4 - 1) .. + 3 of chunk n + 1.
          // The lane's address is formed once a row; the chunks are constant offsets from it.
          const bool odd = t4 & 1;
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int row = (warp & 3) * 16 + g + 8 * r;
            float* dst = dq_acc + ((doc.q_offset + q0 + row) * H + h) * D + wg * (NDQ * 8) +
                         2 * (t4 & ~1) + (odd ? 8 : 0);
#pragma unroll
            for (int n = 0; n < NDQ; n += 2) {
              const float a0 = dq[n][2 * r], a1 = dq[n][2 * r + 1];
              const float b0 = dq[n + 1][2 * r], b1 = dq[n + 1][2 * r + 1];
              const float x = __shfl_xor_sync(0xffffffffu, odd ? a0 : b0, 1);
              const float y = __shfl_xor_sync(0xffffffffu, odd ? a1 : b1, 1);
              const float4 v = odd ? make_float4(x, y, b0, b1) : make_float4(a0, a1, x, y);
              red_add_f32x4(dst + n * 8, v, row < nq);
            }
          }
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
    }
  }
  if constexpr (kPG)
    if (n_steps > 0) {
      pg.flush();       // the thread's pending runs (param_grad.cuh) into shared memory
      __syncthreads();  // every pair's adds done
      mod0.param_grad_end(pg);
    }
  store_dkv<D>(p, doc, j0, kh, nk, warp * 16 + g, t4, dk_acc, dv_acc, dk, dv, dkv_heads);
}

}  // namespace driftless::layers::gpu::fast::bwd
