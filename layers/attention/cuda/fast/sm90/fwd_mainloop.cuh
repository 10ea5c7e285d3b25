// Mainloop of the sm_90a attention forward: the producer warp's TMA loads into the Q, K and V
// rings, and a consumer warpgroup's online softmax over the key tiles of an item.
//
// Consumer schedule (FlashAttention-3's): the product S = Q K^T of tile t + 1 and O += P V of
// tile t are issued together, and the softmax of tile t + 1 runs while P V is on the tensor
// cores (intra-warpgroup overlap); the two consumer warpgroups take turns issuing their
// products through two named barriers (ping-pong), so one's softmax runs under the other's
// products.
#pragma once
#include "layers/attention/cuda/fast/sm90/async_copy.cuh"
#include "layers/attention/cuda/fast/sm90/fwd_softmax.cuh"
#include "layers/attention/cuda/fast/sm90/fwd_traits.cuh"
#include "layers/attention/cuda/fast/sm90/tile_scheduler.cuh"

namespace driftless::layers::gpu::fast::sm90 {

// Tensor maps of q, k and v (tensor_maps.h): 3-D (D, heads, rows), boxes of 64 x 1 x rows.
struct FwdMaps {
  alignas(64) unsigned char q[128], k[128], v[128];
};

// The CTA's barriers and tiles, as 32-bit shared addresses.
template <class T>
struct FwdSmem {
  uint32_t base;
  __device__ uint32_t q(int s) const { return base + T::kQOff + s * T::kQBytes; }
  __device__ uint32_t k(int s) const { return base + T::kKOff + s * T::kKvBytes; }
  __device__ uint32_t v(int s) const { return base + T::kVOff + s * T::kKvBytes; }
  __device__ uint32_t bar(int i) const { return base + T::kBarOff + 8 * i; }
  __device__ uint32_t q_full(int s) const { return bar(s); }
  __device__ uint32_t q_empty(int s) const { return bar(T::kQStages + s); }
  __device__ uint32_t k_full(int s) const { return bar(2 * T::kQStages + s); }
  __device__ uint32_t k_empty(int s) const { return bar(2 * T::kQStages + T::kKvStages + s); }
  __device__ uint32_t v_full(int s) const { return bar(2 * T::kQStages + 2 * T::kKvStages + s); }
  __device__ uint32_t v_empty(int s) const { return bar(2 * T::kQStages + 3 * T::kKvStages + s); }

  // Thread 0; a CTA barrier follows. Full barriers: the producer's one arrival (plus its TMA
  // bytes); empty barriers: one arrival per consumer warp.
  __device__ void init() const {
    for (int s = 0; s < T::kQStages; ++s) {
      mbar_init(q_full(s), 1);
      mbar_init(q_empty(s), T::kConsumerWarps);
    }
    for (int s = 0; s < T::kKvStages; ++s) {
      mbar_init(k_full(s), 1);
      mbar_init(k_empty(s), T::kConsumerWarps);
      mbar_init(v_full(s), 1);
      mbar_init(v_empty(s), T::kConsumerWarps);
    }
    mbar_init_fence();
  }
};

// Rows [n_valid, kBlockN) of a V tile must be exact zeros (P is 0 there, and 0 x NaN from
// padding rows or unwritten buffer rows would not be): the producer warp loads the last,
// partial tile of a document itself, zero-filling those rows, and arrives when it is visible
// to the tensor cores.
template <class T>
__device__ __forceinline__ void load_partial_tile(uint32_t dst, const bf16* src, int64_t ld,
                                                  int n_valid, uint32_t full, int lane) {
  load_rows_zero_filled<T::kBlockN, T::kD>(dst, src, ld, n_valid, lane);
  fence_proxy_async();
  __syncwarp();
  if (lane == 0) mbar_arrive(full);
}

// The producer warp: for every item with keys to see, Q, then K and V of each key tile, each
// into the next stage of its ring once the consumers have released it. kNarrow: the
// consumers' (NarrowsTiles of the modifier), so both walk the same key tiles.
template <class T, bool kNarrow>
__device__ void produce(const FwdMaps& maps, const Problem& p, const Tile* tiles,
                        StaticScheduler sched, const FwdSmem<T>& sm, int lane) {
  constexpr int D = T::kD;
  if (lane == 0) {
    tma_prefetch_map(maps.q);
    tma_prefetch_map(maps.k);
    tma_prefetch_map(maps.v);
  }
  PipeState<T::kQStages> qs;
  PipeState<T::kKvStages> ks, vs;
  const bf16* vbase = static_cast<const bf16*>(p.v);
  const int64_t v_ld = v_heads(p) * D;
  for (int w = sched.first(); sched.valid(w); w = sched.next(w)) {
    const ItemInfo b = ItemInfo::make<T::kBlockM, T::kBlockN, kNarrow>(p, tiles, w);
    if (b.n_tiles == 0) continue;
    mbar_wait(sm.q_empty(qs.stage), qs.phase ^ 1u);
    if (lane == 0) {
      mbar_arrive_expect_tx(sm.q_full(qs.stage), T::kQBytes);
      for (int hf = 0; hf < T::kHalves; ++hf)
        tma_load_3d(sm.q(qs.stage) + hf * T::kBlockM * 128, maps.q, sm.q_full(qs.stage), hf * 64,
                    b.h, int(b.doc.q_offset) + b.i0);
    }
    qs.advance();
    for (int t = 0; t < b.n_tiles; ++t) {
      const int j0 = b.j_begin + t * T::kBlockN;
      const int row = int(b.doc.k_offset) + j0;
      mbar_wait(sm.k_empty(ks.stage), ks.phase ^ 1u);
      if (lane == 0) {
        mbar_arrive_expect_tx(sm.k_full(ks.stage), T::kKvBytes);
        for (int hf = 0; hf < T::kHalves; ++hf)
          tma_load_3d(sm.k(ks.stage) + hf * T::kBlockN * 128, maps.k, sm.k_full(ks.stage), hf * 64,
                      b.kh, row);
      }
      ks.advance();
      mbar_wait(sm.v_empty(vs.stage), vs.phase ^ 1u);
      const int n_valid = int(b.doc.k_len) - j0;
      if (n_valid >= T::kBlockN) {
        if (lane == 0) {
          mbar_arrive_expect_tx(sm.v_full(vs.stage), T::kKvBytes);
          for (int hf = 0; hf < T::kHalves; ++hf)
            tma_load_3d(sm.v(vs.stage) + hf * T::kBlockN * 128, maps.v, sm.v_full(vs.stage),
                        hf * 64, b.kh, row);
        }
      } else {
        load_partial_tile<T>(sm.v(vs.stage), vbase + (int64_t(row) * v_heads(p) + b.kh) * D, v_ld,
                             n_valid, sm.v_full(vs.stage), lane);
      }
      vs.advance();
    }
  }
}

// Per-thread state of a consumer warpgroup for one item: O (64 x D over the warpgroup, the
// mma.sync fragment layout of wgmma.cuh), and the running row maximum and sum (log2 domain)
// of the thread's two rows.
template <int D>
struct FwdAccum {
  float o[D / 8][4];
  float row_max[2], row_sum[2];
};

// One consumer warpgroup (index cw) over the key tiles of item b. kLin: ModNone with a
// positive scale (the row maximum taken over raw products, one FFMA an element).
template <class T, class M, bool kLin>
__device__ void consume(const Problem& p, const ItemInfo& b, const M& mod, const FwdSmem<T>& sm,
                        int cw, PipeState<T::kQStages>& qs, PipeState<T::kKvStages>& ks,
                        PipeState<T::kKvStages>& vs, FwdAccum<T::kD>& acc) {
  constexpr int D = T::kD;
  constexpr int NK = T::kBlockN / 8, ND = D / 8, KD = D / 16, KK = T::kBlockN / 16;
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int row0 = cw * 64 + warp * 16 + g;  // the thread's rows: row0 and row0 + 8
  int lo[2], hi[2], qpos[2];  // the rows' visible keys; their position among the keys
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    lo[r] = 1;
    hi[r] = 0;
    if (row < b.nq) row_keys(p, b.doc, b.i0 + row, &lo[r], &hi[r]);
    qpos[r] = b.i0 + row + int(b.doc.k_len) - int(b.doc.q_len);
  }
#pragma unroll
  for (int n = 0; n < ND; ++n) acc.o[n][0] = acc.o[n][1] = acc.o[n][2] = acc.o[n][3] = 0.f;
  acc.row_max[0] = acc.row_max[1] = -INFINITY;
  acc.row_sum[0] = acc.row_sum[1] = 0.f;
  if (b.n_tiles == 0) return;

  const uint32_t my_bar = T::kSchedBarrier + cw, other_bar = T::kSchedBarrier + (cw ^ 1);
  auto release = [&](uint32_t bar) {
    if (lane == 0) mbar_arrive(bar);
  };
  const uint32_t q_tile = sm.q(qs.stage);
  auto issue_s = [&](float(&s)[NK][4], int stage) {
#pragma unroll
    for (int kd = 0; kd < KD; ++kd)
      wgmma_ss<0>(s, desc_k_major(q_tile, T::kBlockM, kd, cw * 64),
                  desc_k_major(sm.k(stage), T::kBlockN, kd), kd);
    wg_commit();
  };
  auto issue_pv = [&](const uint32_t(&pa)[KK][4], int stage) {
#pragma unroll
    for (int kk = 0; kk < KK; ++kk)
      wgmma_rs<1>(acc.o, pa[kk], desc_mn_major(sm.v(stage), T::kBlockN, kk));
    wg_commit();
  };
  OnlineSoftmax<M, kLin> softmax{mod, lo[0], lo[1], hi[0], hi[1], qpos[0], qpos[1], t4};
  auto rescale = [&](const float(&corr)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (__any_sync(0xffffffffu, corr[r] != 1.f)) {
#pragma unroll
        for (int n = 0; n < ND; ++n) acc.o[n][2 * r] *= corr[r], acc.o[n][2 * r + 1] *= corr[r];
      }
  };
  auto to_p = [&](uint32_t(&pa)[KK][4], const float(&s)[NK][4]) {
#pragma unroll
    for (int kk = 0; kk < KK; ++kk) c_to_a(pa[kk], s[2 * kk], s[2 * kk + 1]);
  };
  auto hold_p = [](uint32_t(&pa)[KK][4]) {
#pragma unroll
    for (int kk = 0; kk < KK; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kk][e])::"memory");
  };

  float s[NK][4], corr[2];
  uint32_t pa[KK][4];
  mbar_wait(sm.q_full(qs.stage), qs.phase);
  mbar_wait(sm.k_full(ks.stage), ks.phase);
  if constexpr (T::kPingpong) named_sync(my_bar, 2 * 128);
  wg_fence();
  issue_s(s, ks.stage);
  if constexpr (T::kPingpong) named_arrive(other_bar, 2 * 128);
  wg_wait<0>();
  wg_hold(s);
  release(sm.k_empty(ks.stage));
  ks.advance();
  softmax.template tile<T::kBlockN>(b, s, b.j_begin, acc.row_max, acc.row_sum, corr);
  to_p(pa, s);
  for (int t = 1; t < b.n_tiles; ++t) {
    mbar_wait(sm.k_full(ks.stage), ks.phase);
    if constexpr (T::kPingpong) named_sync(my_bar, 2 * 128);
    wg_fence();
    issue_s(s, ks.stage);
    mbar_wait(sm.v_full(vs.stage), vs.phase);
    issue_pv(pa, vs.stage);
    if constexpr (T::kPingpong) named_arrive(other_bar, 2 * 128);
    wg_wait<1>();  // S done (groups complete in order); P V still running
    wg_hold(s);
    release(sm.k_empty(ks.stage));
    ks.advance();
    softmax.template tile<T::kBlockN>(b, s, b.j_begin + t * T::kBlockN, acc.row_max, acc.row_sum,
                                      corr);
    wg_wait<0>();
    wg_hold(acc.o);
    hold_p(pa);
    release(sm.v_empty(vs.stage));
    vs.advance();
    rescale(corr);
    to_p(pa, s);
  }
  mbar_wait(sm.v_full(vs.stage), vs.phase);
  wg_fence();
  issue_pv(pa, vs.stage);
  wg_wait<0>();
  wg_hold(acc.o);
  hold_p(pa);
  release(sm.v_empty(vs.stage));
  vs.advance();
  release(sm.q_empty(qs.stage));
  qs.advance();
}

}  // namespace driftless::layers::gpu::fast::sm90
