// Device building blocks of the fast attention kernels (fast_attention.h): cp.async tile
// loads into XOR-swizzled shared memory (conflict-free ldmatrix), the m16n8k16 bf16 mma with
// fp32 accumulation, and the score modifiers bound to one head. Fragment layouts are the
// PTX ISA's for mma.m16n8k16 (g = lane / 4 is the row group, t = lane % 4 the column pair).
#pragma once
#include <cuda_bf16.h>

#include "layers/attention/cuda/fast/fast_attention.h"
#include "layers/attention/mask.h"
#include "layers/attention/rtc_std.h"

namespace driftless::layers::gpu::fast {

// Row strides of q, k and v counted in heads (Problem::q_row_heads ...; the launchers fill
// them through with_row_strides, so 0 never reaches a kernel).
__device__ __forceinline__ int64_t q_heads(const Problem& p) { return p.q_row_heads; }
__device__ __forceinline__ int64_t k_heads(const Problem& p) { return p.k_row_heads; }
__device__ __forceinline__ int64_t v_heads(const Problem& p) { return p.v_row_heads; }

using bf16 = __nv_bfloat16;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// Dynamic shared memory is taken 1024-byte aligned (the 128-byte swizzle of wgmma.cuh repeats
// every 1024 bytes); launches reserve kSmemAlign bytes more for it.
constexpr int kSmemAlign = 1024;
__device__ __forceinline__ unsigned char* align_smem(unsigned char* raw) {
  const uint32_t a = smem_u32(raw);
  return raw + (((a + kSmemAlign - 1) & ~uint32_t(kSmemAlign - 1)) - a);
}

// 16 bytes global -> shared; zero-filled (nothing read) when !valid.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
// 4 bytes global -> shared (zero-filled when !valid).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// 2^x by the MUFU approximation with subnormal results flushed to zero: one instruction where
// exp2f adds a range check and two rescaling multiplies for subnormal results. Same value for
// every normal result; a probability below 2^-126 of its row's maximum becomes 0.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// op over leaf(0) .. leaf(N - 1) as a balanced tree (pairs of neighbours, then pairs of
// pairs): log2(N) dependent steps instead of N for a chain.
template <int N, class Leaf, class Op>
__device__ __forceinline__ float tree_reduce(Leaf leaf, Op op) {
  float v[N];
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = leaf(i);
#pragma unroll
  for (int w = 1; w < N; w *= 2)
#pragma unroll
    for (int i = 0; i + w < N; i += 2 * w) v[i] = op(v[i], v[i + w]);
  return v[0];
}

// Two C fragments (keys 16kk..16kk+15 of one 16-row block) as the A fragment of the next
// product: the FlashAttention register reuse of P.
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4],
                                       const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

// The same, split into a bf16 head and a bf16 tail (x ~ head + tail to ~2^-16 relative), for
// a product whose bf16 rounding of the A operand would cost accuracy (dS in dQ = dS K).
__device__ __forceinline__ void c_to_a_split(uint32_t (&hi)[4], uint32_t (&lo)[4],
                                             const float (&c0)[4], const float (&c1)[4]) {
  const float* src[4][2] = {{&c0[0], &c0[1]}, {&c0[2], &c0[3]}, {&c1[0], &c1[1]}, {&c1[2], &c1[3]}};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float x = *src[i][0], y = *src[i][1];
    const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
    hi[i] = *reinterpret_cast<const uint32_t*>(&h);
    lo[i] = pack_bf16(x - __low2float(h), y - __high2float(h));
  }
}

// A tile of ROWS rows x D bf16 in shared memory, in the layout wgmma reads with the 128-byte
// swizzle (wgmma.cuh): groups of 8 rows, each group D / 64 atoms of 8 rows x 128 bytes; the
// 16-byte chunk c of row r sits in atom c / 8 at chunk (c % 8) ^ (r % 8), so the 8 rows an
// ldmatrix reads hit 8 different bank groups. At D = 64 this is plain rows of 128 bytes.
template <int D>
__device__ __forceinline__ uint32_t tile_addr(uint32_t base, int r, int c) {
  return base + uint32_t((((r >> 3) * (D / 64) + (c >> 3)) << 10) + ((r & 7) << 7) +
                         (((c & 7) ^ (r & 7)) << 4));
}

// Rows [0, n_valid) of a (rows, ld) global matrix into a swizzled tile; rows past n_valid are
// zero-filled so partial tiles never read out of bounds and contribute exact zeros.
// THREADS is the block size. The loop's trip count is a constant (a loop from threadIdx.x is
// not unrolled: measured in the forward's SASS, ~30 instructions a 16-byte chunk), and a
// thread's column chunk is the same on every trip, its rows THREADS / (D / 8) apart. Offsets
// within the tile are 32-bit (ROWS x ld < 2^31: ld is at most INT16_MAX heads of 128), and ld
// and the thread index pass through opaque moves so the addresses are recomputed at each call,
// not hoisted out of the callers' loops into registers (which spilled the kernels at their
// register caps).
template <int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile(uint32_t dst, const bf16* src, int64_t ld, int n_valid) {
  constexpr int kChunks = D / 8, kTotal = ROWS * kChunks;
  static_assert(THREADS % kChunks == 0, "a thread's column chunk is fixed");
  static_assert(kTotal % THREADS == 0, "every thread makes the same trips");
  constexpr int kStep = THREADS / kChunks;  // rows between a thread's trips
  int ld32, tid;
  asm volatile("mov.b32 %0, %1;" : "=r"(ld32) : "r"(int(ld)));
  asm volatile("mov.b32 %0, %1;" : "=r"(tid) : "r"(int(threadIdx.x)));
  const int r0 = tid / kChunks, c = tid % kChunks;
#pragma unroll
  for (int i = 0; i < kTotal / THREADS; ++i) {
    const int r = r0 + i * kStep;
    const bool ok = r < n_valid;
    cp_async16(tile_addr<D>(dst, r, c), ok ? src + (r * ld32 + c * 8) : src, ok);
  }
}

// A fragment (rows r0..r0+15, d columns 16kd..16kd+15) of a row-major tile.
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], uint32_t tile, int r0, int kd, int lane) {
  ldmatrix_x4(a, tile_addr<D>(tile, r0 + (lane & 15), kd * 2 + (lane >> 4)));
}
// B fragments of two n-tiles (rows n0..n0+15 of the tile are the n index, columns
// 16kd.. the k index): b[0], b[1] for n-tile n0, b[2], b[3] for n0 + 8. For S = Q K^T.
template <int D>
__device__ __forceinline__ void load_b(uint32_t (&b)[4], uint32_t tile, int n0, int kd, int lane) {
  ldmatrix_x4(b,
              tile_addr<D>(tile, n0 + (lane & 7) + ((lane >> 4) << 3), kd * 2 + ((lane >> 3) & 1)));
}
// B fragments of two n-tiles where the tile's rows are the k index (rows k0..k0+15) and its
// columns the n index (columns n0..n0+15): for O = P V. b[0], b[1]: columns n0; b[2], b[3]:
// n0 + 8.
template <int D>
__device__ __forceinline__ void load_b_trans(uint32_t (&b)[4], uint32_t tile, int k0, int n0,
                                             int lane) {
  ldmatrix_x4_trans(
      b, tile_addr<D>(tile, k0 + (lane & 7) + (((lane >> 3) & 1) << 3), (n0 >> 3) + (lane >> 4)));
}

// The two products both backward kernels recompute on the mma.sync path, over k = D: s = A B^T
// and dp = A2 B2^T for the warp's 16 rows r0.. of the row-major tiles a and a2, against the
// N rows of the tiles b and b2 (the n index). Zeroes s and dp first.
template <int D, int N>
__device__ __forceinline__ void mma_two_products(float (&s)[N / 8][4], float (&dp)[N / 8][4],
                                                 uint32_t a, uint32_t a2, uint32_t b,
                                                 uint32_t b2, int r0, int lane) {
#pragma unroll
  for (int n = 0; n < N / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd) {
    uint32_t fa[4], fa2[4];
    load_a<D>(fa, a, r0, kd, lane);
    load_a<D>(fa2, a2, r0, kd, lane);
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t f[4];
      load_b<D>(f, b, np * 16, kd, lane);
      mma_bf16(s[2 * np], fa, f[0], f[1]);
      mma_bf16(s[2 * np + 1], fa, f[2], f[3]);
      load_b<D>(f, b2, np * 16, kd, lane);
      mma_bf16(dp[2 * np], fa2, f[0], f[1]);
      mma_bf16(dp[2 * np + 1], fa2, f[2], f[3]);
    }
  }
}

// Score modifiers bound to one head and document (bind(h, doc): doc is the index of the
// document within the call, Tile::doc; the built-ins ignore it): x(dot) is the modified score in log2 units
// (value(scale * dot) * log2 e), x_dx also gives d value / d score; the value and derivative
// are score_mod.h's, shared with the CPU path (softcap's tanh is this file's tanh_fast).
struct ModNone {
  float scale_log2;
  __device__ void bind(int, int) {}
  __device__ float x(float dot, int, int) const { return dot * scale_log2; }
  __device__ float x_dx(float dot, int, int, float* dx) const {
    *dx = 1.f;
    return dot * scale_log2;
  }
};
// 1 / x by the MUFU approximation (one instruction; 1 / inf = 0).
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// tanh(y) = 1 - 2 / (2^(2 y log2 e) + 1) from the ex2 and rcp approximations, with the
// argument given as two_log2e_y = 2 y log2 e: four instructions where tanhf takes ~20 with a
// branch. Absolute error ~1e-7 (so the relative error grows as y -> 0, where the capped score
// cap * tanh is near 0 too); exactly +-1 for large |y|.
__device__ __forceinline__ float tanh_fast(float two_log2e_y) {
  return fmaf(-2.f, rcp_approx(exp2_ftz(two_log2e_y) + 1.f), 1.f);
}
// cap * tanh(s / cap). Built on the host with its factors folded (a division by the cap
// per element, IEEE-exact as nvcc compiles `/` by default, cost more than the rest of the
// element's softcap): tanh's argument is dot * arg, the value in log2 units cap_log2 * t.
struct ModSoftcap {
  float arg, cap_log2;  // 2 log2(e) scale / cap; cap log2(e)
  static ModSoftcap make(float scale, float cap) {
    return ModSoftcap{2.f * kLog2e * scale / cap, cap * kLog2e};
  }
  __device__ void bind(int, int) {}
  __device__ float x(float dot, int, int) const {
    return score_mod::softcap_value_of_tanh(tanh_fast(dot * arg), cap_log2);
  }
  __device__ float x_dx(float dot, int, int, float* dx) const {
    const float t = tanh_fast(dot * arg);
    *dx = score_mod::softcap_derivative_of_tanh(t);
    return score_mod::softcap_value_of_tanh(t, cap_log2);
  }
};
struct ModAlibi {  // s - slope[h] * |q - k|
  float scale;
  const float* slopes;
  float slope = 0.f;
  __device__ void bind(int h, int) { slope = slopes[h]; }
  __device__ float x(float dot, int q, int k) const {
    return score_mod::alibi_value(dot * scale, slope, q, k) * kLog2e;
  }
  __device__ float x_dx(float dot, int q, int k, float* dx) const {
    *dx = score_mod::alibi_derivative(dot);
    return x(dot, q, k);
  }
};

// Modifiers whose per-score work is heavy (softcap's tanh): the forward kernels give them
// the tile shapes that leave it the registers (mma_sync/forward_kernel.cuh Cfg, sm90/fwd_traits.cuh
// FwdConfig), and the launchers of a run-time compiled modifier the same (ModLauncher::heavy).
template <class M>
struct HeavyMod {
  static constexpr bool value = false;
};
template <>
struct HeavyMod<ModSoftcap> {
  static constexpr bool value = true;
};

// Modifiers whose tiles the host may narrow (Tile::lo, hi; narrow_blocks below) and give a
// visible range (Tile::vis_lo, vis_hi; block_shown below): a mask expression's
// (mod_expr.cuh). The kernels of every other modifier skip both, so they compile as they did
// without them (the tiles of their schedules are never narrowed, their visible ranges empty).
template <class M>
struct NarrowsTiles {
  static constexpr bool value = false;
};

template <bool B>
struct BoolTag {
  static constexpr bool value = B;
};

// Whether the kernel's block [b, b + n) of the other dimension (keys of a query tile, query
// rows of a key tile) lies wholly inside the tile's visible range [vis_lo, vis_hi), where the
// mask shows every pair (mask_narrow.h): false at compile time for modifiers that do not
// narrow tiles. with_visible_block: f(BoolTag<true>{}) there, else f(BoolTag<false>{}), a
// uniform branch a block between the two bodies; the modifier's calls in f take the tag
// (mod_x, mod_x_dx, mod_param_grad), so the former evaluates no mask. Only the latter is
// compiled for modifiers that do not narrow tiles.
template <class M>
__device__ __forceinline__ bool block_shown(int vis_lo, int vis_hi, int b, int n) {
  if constexpr (NarrowsTiles<M>::value)
    return b >= vis_lo && b + n <= vis_hi;
  else
    return false;
}
template <class M, class F>
__device__ __forceinline__ void with_visible_block(int vis_lo, int vis_hi, int b, int n, F&& f) {
  if constexpr (NarrowsTiles<M>::value) {
    if (block_shown<M>(vis_lo, vis_hi, b, n)) {
      f(BoolTag<true>{});
      return;
    }
  }
  f(BoolTag<false>{});
}

// The modifier's x and param_grad; kShown: the pair lies in a block the mask shows
// whole (block_shown), so a mask expression skips evaluating its mask there (the
// value it would give is "visible": the same bits).
template <bool kShown, class M>
__device__ __forceinline__ float mod_x(const M& m, float dot, int q, int k) {
  if constexpr (kShown)
    return m.x_shown(dot, q, k);
  else
    return m.x(dot, q, k);
}
// The backward's P = exp2(x - lse2) of a pair and x's derivative (dx). A mask expression's
// hidden pair gets P = 0 and dx = 0 after the exponential, not x = -inf before it: the
// compiler then contracts the value's last product into the subtraction (one fma) on every
// pair, as on a block the mask shows whole (kShown: the mask not evaluated) and as for the
// built-ins, so evaluating the mask or skipping it gives the same bits. (A select between the
// product and the subtraction kept them apart: P one rounding off on the masked path.)
template <bool kShown, class M>
__device__ __forceinline__ float mod_p_dx(const M& m, float dot, int q, int k, float lse2,
                                          float* dx) {
  if constexpr (NarrowsTiles<M>::value) {
    float p = exp2_ftz(m.x_dx_shown(dot, q, k, dx) - lse2);
    if constexpr (!kShown) {
      if (!m.visible(q, k)) {
        p = 0.f;
        *dx = 0.f;
      }
    }
    return p;
  } else {
    return exp2_ftz(m.x_dx(dot, q, k, dx) - lse2);
  }
}
template <bool kShown, class M, class Acc>
__device__ __forceinline__ void mod_param_grad(const M& m, float ds, float dot, int q, int k,
                                               Acc& acc) {
  if constexpr (kShown)
    m.param_grad_shown(ds, dot, q, k, acc);
  else
    m.param_grad(ds, dot, q, k, acc);
}

#ifndef __CUDACC_RTC__
// Calls f(mod_functor) for the built-in modifier of the call.
template <class F>
void dispatch_mod(const Problem& p, const Mod& mod, F&& f) {
  switch (mod.kind) {
    case ModKind::none:
      return f(ModNone{p.scale * kLog2e});
    case ModKind::softcap:
      return f(ModSoftcap::make(p.scale, mod.softcap));
    case ModKind::alibi:
      return f(ModAlibi{p.scale, mod.alibi_slopes});
  }
}
#endif

// In 32 bits (the dK/dV kernel's masked steps call this per element; in 64 bits it was ~4x
// the instructions of an unmasked element). Document lengths are below kMaxDocLen here.
__device__ __forceinline__ void row_keys(const Problem& p, const Doc& d, int i, int* lo, int* hi) {
  visible_key_range<int>(i, int(d.q_len), int(d.k_len), p.causal,
                         window_in_32_bits(p.window_left, d.q_len, d.k_len),
                         window_in_32_bits(p.window_right, d.q_len, d.k_len), lo, hi);
}

// The blocks [*begin, *begin + *n * block) of a kernel's loop over the other dimension (keys
// of a query tile, query steps of a key tile), narrowed to the tile's range [t.lo, t.hi):
// whole blocks are dropped from either end, so the loop keeps its grid (the blocks it keeps
// are the ones it ran before, and the element mask still handles the pairs of a partial
// block exactly). The dropped blocks are the ones a mask hides whole (mask_narrow.h): their
// probabilities are exact zeros, so the bits do not change. An empty range leaves *n = 0, a
// row that sees nothing (out 0, lse -inf; dk, dv 0).
__device__ __forceinline__ void narrow_blocks(const Tile& t, int block, int* begin, int* n) {
  if (*n <= 0) return;
  if (t.hi <= t.lo) {
    *n = 0;
    return;
  }
  int end = *begin + *n * block;  // below 2^30: documents are below kMaxDocLen
  if (t.lo > *begin) *begin += (t.lo - *begin) / block * block;
  if (t.hi < end) end -= (end - t.hi) / block * block;
  *n = end > *begin ? (end - *begin) / block : 0;
}

}  // namespace driftless::layers::gpu::fast
