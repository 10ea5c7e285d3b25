// Mainloop of the sm_90a dK/dV kernel with the atomic dQ: the producer warp's loads, the dQ
// warp's TMA reductions, and a consumer warpgroup's steps over the query tiles of an item.
//
// An item is one key tile of kBlockN keys and one kv head (k_tiles_by_head); its steps are
// (query head of the GQA group, query tile of kBlockM rows), heads outermost (bwd_step.cuh
// query_steps). A consumer step: S^T = K Q^T and dP^T = V dO^T in kSplit parts of the
// queries (the element-wise work of one part runs while the tensor cores do the next's);
// P^T and dS^T stay in registers as the A operand of dV += P^T dO and dK += dS^T Q; dS^T
// also goes to shared memory, where both warpgroups' halves make the A operand of
// dQ = dS K (each warpgroup computes D / 2 of dQ's columns over all 128 keys). dQ goes to a
// shared f32 tile that the dQ warp adds to the global sums with one TMA reduction a box,
// off the consumers' path.
#pragma once
#include "layers/attention/cuda/fast/bwd_step.cuh"
#include "layers/attention/cuda/fast/param_grad.cuh"
#include "layers/attention/cuda/fast/sm90/async_copy.cuh"
#include "layers/attention/cuda/fast/sm90/bwd_traits.cuh"
#include "layers/attention/cuda/fast/sm90/ordered_dq.h"

namespace driftless::layers::gpu::fast::sm90 {

// Tensor maps (tensor_maps.h): q, dO, k, v in bf16 boxes of 64 columns; dq_acc in f32 boxes of
// 32 columns, each of kBlockM rows (q, dO, dq) or kBlockN rows (k, v).
struct BwdMaps {
  alignas(64) unsigned char q[128], dout[128], k[128], v[128], dq[128];
};

// The CTA's barriers and tiles, as 32-bit shared addresses (and the rows of lse and delta as
// pointers).
template <class T>
struct BwdSmem {
  unsigned char* ptr;
  uint32_t base;
  __device__ uint32_t k() const { return base + T::kKOff; }
  __device__ uint32_t v() const { return base + T::kVOff; }
  __device__ uint32_t q(int s) const { return base + T::kQOff + s * T::kQBytes; }
  __device__ uint32_t dout(int s) const { return base + T::kDOOff + s * T::kQBytes; }
  __device__ uint32_t ds(int s) const { return base + T::kDsOff + s * T::kDsBytes; }
  __device__ uint32_t dq() const { return base + T::kDqOff; }
  __device__ float* lse_rows(int s) const {
    return reinterpret_cast<float*>(ptr + T::kLseOff + s * T::kRowBytes);
  }
  __device__ float* delta_rows(int s) const {
    return reinterpret_cast<float*>(ptr + T::kDeltaOff + s * T::kRowBytes);
  }
  __device__ uint32_t bar(int i) const { return base + T::kBarOff + 8 * i; }
  __device__ uint32_t kv_full() const { return bar(0); }
  __device__ uint32_t kv_empty() const { return bar(1); }
  __device__ uint32_t step_full(int s) const { return bar(2 + s); }
  __device__ uint32_t step_empty(int s) const { return bar(2 + T::kStages + s); }
  __device__ uint32_t item_full(int s) const { return bar(2 + 2 * T::kStages + s); }
  __device__ uint32_t item_empty(int s) const {
    return bar(2 + 2 * T::kStages + T::kItemSlots + s);
  }
  __device__ volatile int* item_slot(int s) const {
    return reinterpret_cast<volatile int*>(ptr + T::kItemOff) + s;
  }

  // Thread 0; a CTA barrier follows. kv_full: the producer's one arrival (plus its TMA
  // bytes); step_full: lane 0's for Q and dO (plus their TMA bytes, or after the
  // zero-filled rows) and each producer lane's once its cp.async copies of lse and delta
  // rows have landed; empty barriers: one arrival per consumer warp; item_full: the
  // producer's; item_empty: each reader warp's (the consumers' and the dQ warp's).
  __device__ void init() const {
    mbar_init(kv_full(), 1);
    mbar_init(kv_empty(), T::kConsumerWarps);
    for (int s = 0; s < T::kStages; ++s) {
      mbar_init(step_full(s), 1 + 32);
      mbar_init(step_empty(s), T::kConsumerWarps);
    }
    for (int s = 0; s < T::kItemSlots; ++s) {
      mbar_init(item_full(s), 1);
      mbar_init(item_empty(s), T::kConsumerWarps + 1);
    }
    mbar_init_fence();
  }
};

// The CTA's items, taken from the launch's list in its order as the CTA starts each, so a
// CTA whose items were light takes more (the static bands of tile_scheduler.cuh left the
// busiest SM ~10% over the mean; ncu): the producer warp takes them (its first is blockIdx.x,
// then gridDim.x plus an atomic counter zeroed before the launch) and hands each index to
// the consumers and the dQ warp through a ring of slots in shared memory. An index past the
// list ends every role's loop. The list's order (k_tiles_by_head: runs of one document and
// head, whose dQ sums stay in L2) is still the order the GPU works in.
template <class T>
struct ItemRing {
  PipeState<T::kItemSlots> st;
  // The producer warp, every lane: hand item w on once its slot is free.
  __device__ __forceinline__ void put(const BwdSmem<T>& sm, int w, int lane) {
    mbar_wait(sm.item_empty(st.stage), st.phase ^ 1u);
    if (lane == 0) {
      *sm.item_slot(st.stage) = w;
      mbar_arrive(sm.item_full(st.stage));
    }
    __syncwarp();
    st.advance();
  }
  // A reader warp, every lane: the next item; the warp's lanes read it before lane 0
  // releases the slot.
  __device__ __forceinline__ int take(const BwdSmem<T>& sm, int lane) {
    mbar_wait(sm.item_full(st.stage), st.phase);
    const int w = *sm.item_slot(st.stage);
    __syncwarp();
    if (lane == 0) mbar_arrive(sm.item_empty(st.stage));
    st.advance();
    return w;
  }
};

// One item: key tile `tile` (keys j0 .. j0 + nk - 1 of doc, kv head kh) and its steps.
struct BwdItem {
  Tile tile;
  Doc doc;
  int kh, j0, nk, group, i_begin, n_qt, n_steps;
  __device__ int head(int s) const { return kh * group + s / n_qt; }
  __device__ int q0(int s, int block_m) const { return i_begin + (s % n_qt) * block_m; }

  template <class T, class M>
  __device__ __forceinline__ static BwdItem make(const Problem& p, const Tile* tiles, int w) {
    BwdItem b;
    b.tile = tiles[w];
    b.kh = b.tile.head;
    b.doc = p.docs[b.tile.doc];
    b.j0 = b.tile.start;
    b.nk = min(T::kBlockN, int(b.doc.k_len) - b.j0);
    b.group = int(p.heads / p.kv_heads);
    const bwd::QuerySteps qs = bwd::query_steps<T::kBlockN, T::kBlockM, M>(p, b.doc, b.tile, b.nk);
    b.i_begin = qs.i_begin;
    b.n_qt = qs.n_qt;
    b.n_steps = b.group * b.n_qt;
    return b;
  }
};

// The producer warp: for every item with steps, K and V once the consumers have released the
// previous item's, then each step's Q, dO (TMA boxes, or zero-filled rows for a partial
// tile at the document's end), lse and delta (the lanes' cp.async copies while the TMA runs;
// zeros past the document, whose P the mask zeroes) into the next stage of the ring.
template <class T, class M>
__device__ void bwd_produce(const BwdMaps& maps, const Problem& p, const Tile* tiles, int n_items,
                            int* item_counter, const BwdSmem<T>& sm, const bf16* dout,
                            const float* lse, const float* delta, int lane) {
  constexpr int D = T::kD;
  if (lane == 0) {
    tma_prefetch_map(maps.q);
    tma_prefetch_map(maps.dout);
    tma_prefetch_map(maps.k);
    tma_prefetch_map(maps.v);
  }
  const int64_t H = p.heads, QH = q_heads(p), KH = k_heads(p), VH = v_heads(p);
  PipeState<1> kv;
  PipeState<T::kStages> st;
  auto load_item = [&](int w) {
    const BwdItem b = BwdItem::make<T, M>(p, tiles, w);
    if (b.n_steps == 0) return;
    const int krow = int(b.doc.k_offset) + b.j0;
    mbar_wait(sm.kv_empty(), kv.phase ^ 1u);
    if (b.nk == T::kBlockN) {
      if (lane == 0) {
        mbar_arrive_expect_tx(sm.kv_full(), 2 * T::kKvBytes);
        for (int hf = 0; hf < T::kHalves; ++hf) {
          tma_load_3d(sm.k() + hf * T::kBlockN * 128, maps.k, sm.kv_full(), hf * 64, b.kh, krow);
          tma_load_3d(sm.v() + hf * T::kBlockN * 128, maps.v, sm.kv_full(), hf * 64, b.kh, krow);
        }
      }
    } else {
      const bf16* kg = static_cast<const bf16*>(p.k) + (int64_t(krow) * KH + b.kh) * D;
      const bf16* vg = static_cast<const bf16*>(p.v) + (int64_t(krow) * VH + b.kh) * D;
      load_rows_zero_filled<T::kBlockN, D>(sm.k(), kg, KH * D, b.nk, lane);
      load_rows_zero_filled<T::kBlockN, D>(sm.v(), vg, VH * D, b.nk, lane);
      fence_proxy_async();
      __syncwarp();
      if (lane == 0) mbar_arrive(sm.kv_full());
    }
    kv.advance();
    for (int s = 0; s < b.n_steps; ++s) {
      const int h = b.head(s), q0 = b.q0(s, T::kBlockM);
      const int n = min(T::kBlockM, int(b.doc.q_len) - q0);
      const int qrow = int(b.doc.q_offset) + q0;
      mbar_wait(sm.step_empty(st.stage), st.phase ^ 1u);
      const uint32_t full = sm.step_full(st.stage);
      if (n == T::kBlockM) {
        if (lane == 0) {
          mbar_arrive_expect_tx(full, 2 * T::kQBytes);
          for (int hf = 0; hf < T::kHalves; ++hf) {
            tma_load_3d(sm.q(st.stage) + hf * T::kBlockM * 128, maps.q, full, hf * 64, h, qrow);
            tma_load_3d(sm.dout(st.stage) + hf * T::kBlockM * 128, maps.dout, full, hf * 64, h,
                        qrow);
          }
        }
      } else {
        load_rows_zero_filled<T::kBlockM, D>(
            sm.q(st.stage), static_cast<const bf16*>(p.q) + (int64_t(qrow) * QH + h) * D, QH * D,
            n, lane);
        load_rows_zero_filled<T::kBlockM, D>(sm.dout(st.stage), dout + (int64_t(qrow) * H + h) * D,
                                             H * D, n, lane);
        fence_proxy_async();
        __syncwarp();
        if (lane == 0) mbar_arrive(full);
      }
      // lse and delta by cp.async, whose completion the lane's arrival on `full` waits for (no
      // producer registers hold them); zeros past the document (a row inside it addressed,
      // nothing read).
      const uint32_t sl = smem_u32(sm.lse_rows(st.stage)), sd = smem_u32(sm.delta_rows(st.stage));
      for (int r = lane; r < T::kBlockM; r += 32) {
        const int64_t row = h * p.t_q + qrow + min(r, n - 1);
        cp_async4(sl + 4 * r, lse + row, r < n);
        cp_async4(sd + 4 * r, delta + row, r < n);
      }
      cp_async_mbar_arrive(full);
      st.advance();
    }
  };
  ItemRing<T> ring;
  for (int w = int(blockIdx.x);;) {
    ring.put(sm, w, lane);
    if (w >= n_items) break;
    int next = 0;  // taken now, its latency under the item's loads
    if (lane == 0) next = int(gridDim.x) + atomicAdd(item_counter, 1);
    load_item(w);
    w = __shfl_sync(0xffffffffu, next, 0);
  }
  // Outlive every load issued: the consumers release each stage, and K and V, only after
  // waiting for them, so the CTA never exits with a copy into its shared memory in flight.
  for (int s = 0; s < T::kStages; ++s) {
    mbar_wait(sm.step_empty(st.stage), st.phase ^ 1u);
    st.advance();
  }
  mbar_wait(sm.kv_empty(), kv.phase ^ 1u);
}

// The ordered dQ (the deterministic backward): every (64-row query block, query head) has a
// counter of the reductions added to its dQ rows so far, and key tile t adds its step there
// only once every key tile above it that reaches the block has (descending t, the order in
// which k_tiles_by_head_descending lists each run's tiles, so no tile waits on one taken after
// it). Needs every tile's steps on the document's 64-row grid (sm90::dkv_ordered_runs). The
// counters: (t_q / kBlockM + documents + 1) x heads ints, zeroed before the launch; block q0
// / kBlockM of document d is row q_offset / kBlockM + d + q0 / kBlockM, which no other
// document's blocks share.
template <class T>
__device__ __forceinline__ int* ordered_dq_counter(int* counters, const Problem& p,
                                                   const BwdItem& b, int h, int q0) {
  const int64_t row = b.doc.q_offset / T::kBlockM + b.tile.doc + q0 / T::kBlockM;
  return counters + row * p.heads + h;
}
// The dQ warp: for every step of every item, once the consumers have written the step's dQ
// tile, adds it to dq_acc (T_q, H, D) with one TMA reduction a box (rows past the tensor
// skipped; rows past the document are zeros), and releases the tile when the TMA has read
// it. The release of a step is signalled at the next step, so none is left pending at the
// end. kOrdered: each step's reductions wait for the block's counter to reach
// ordered_dq_before (ordered_dq.h), and the counter is bumped once they are complete (at the
// next step's start, after the tile's release, or at the end), so every dQ row is summed in
// one order.
template <class T, class M, bool kOrdered>
__device__ void bwd_write_dq(const BwdMaps& maps, const Problem& p, const Tile* tiles, int n_items,
                             const BwdSmem<T>& sm, int* counters, int lane) {
  if (lane == 0) tma_prefetch_map(maps.dq);
  bool first = true;
  int* pending = nullptr;  // kOrdered: the counter of the last step's reductions
  auto complete_pending = [&] {
    if constexpr (kOrdered) {
      if (lane == 0 && pending != nullptr) {
        bulk_wait<0>();
        bump_counter(pending);
      }
      pending = nullptr;
    }
  };
  ItemRing<T> ring;
  for (int w = ring.take(sm, lane); w < n_items; w = ring.take(sm, lane)) {
    const BwdItem b = BwdItem::make<T, M>(p, tiles, w);
    for (int s = 0; s < b.n_steps; ++s) {
      if (!first) named_arrive(T::kDqEmpty, T::kDqThreads);
      first = false;
      complete_pending();
      named_sync(T::kDqFull, T::kDqThreads);
      if (lane == 0) {
        const int q0 = b.q0(s, T::kBlockM), h = b.head(s), qrow = int(b.doc.q_offset) + q0;
        if constexpr (kOrdered) {
          pending = ordered_dq_counter<T>(counters, p, b, h, q0);
          wait_counter(pending, ordered_dq_before<T::kBlockM, T::kBlockN>(
                                    int(b.doc.q_len), int(b.doc.k_len), p.causal,
                                    p.window_right, b.j0, q0));
        }
        for (int x = 0; x < T::kDqBoxes; ++x)
          tma_reduce_add_3d(maps.dq, sm.dq() + x * T::kDqBoxBytes, x * 32, h, qrow);
        bulk_commit();
        bulk_wait_read<0>();
      }
      __syncwarp();
    }
  }
  complete_pending();
  if (lane == 0) bulk_wait<0>();
}

// The dQ warp of the dK/dV-only kernel: takes every item from the ring (its release counts
// on the item slots' empty barriers) and does nothing else.
template <class T>
__device__ void bwd_skip_items(const BwdSmem<T>& sm, int n_items, int lane) {
  ItemRing<T> ring;
  for (int w = ring.take(sm, lane); w < n_items; w = ring.take(sm, lane)) {
  }
}

// Per-thread accumulators of a consumer warpgroup for one item: dK and dV of its 16 keys a
// warp (64 x D over the warpgroup, the mma.sync fragment layout of wgmma.cuh).
template <int D>
struct BwdAccum {
  float dk[D / 8][4], dv[D / 8][4];
};

// One consumer warpgroup (index cw, keys 64 cw .. 64 cw + 63 of the tile) over the steps of
// item b. first_dq: no dQ tile written yet by this CTA (the first needs no release). kDq
// false: dK and dV only (the deterministic backward's, whose dQ kernel runs apart): no dS^T
// tile, no dQ product, no dQ tile.
template <class T, class M, bool kDq>
__device__ void bwd_consume(const Problem& p, const BwdItem& b, const M& mod0, const BwdSmem<T>& sm,
                            int cw, PipeState<1>& kv, PipeState<T::kStages>& st, bool& first_dq,
                            BwdAccum<T::kD>& acc) {
  constexpr int D = T::kD, KD = D / 16, ND = D / 8, BM = T::kBlockM;
  constexpr int SP = T::kSplit, PQ = BM / SP;  // parts of a step, queries a part
  constexpr int NH = PQ / 8, KH = PQ / 16;     // per part: 8-query chunks, 16-query k steps
  constexpr int NDQ = T::kDqCols / 8;        // 8-column chunks of dQ this warpgroup computes
  // Its first column dq_c0 lies in K's 64-column half dq_c0 / 64, (dq_c0 % 64) x 2 bytes into
  // the rows: the B operand of its dQ product starts there (at head dim 64, a warpgroup's 32
  // columns start 64 bytes into the 128-byte swizzled rows, which the swizzle of the absolute
  // address keeps in place, as the K-major operands' 32-byte k steps).
  const int dq_c0 = cw * T::kDqCols;
  const uint32_t k_dq =
      sm.k() + uint32_t(dq_c0 / 64) * T::kBlockN * 128 + uint32_t(dq_c0 % 64) * 2;
  const int lw = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int warp = cw * 4 + lw;  // consumer warp: keys 16 warp .. of the tile
#pragma unroll
  for (int n = 0; n < ND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc.dk[n][e] = acc.dv[n][e] = 0.f;
  if (b.n_steps == 0) return;
  const int jr[2] = {b.j0 + warp * 16 + g, b.j0 + warp * 16 + g + 8};  // this thread's keys
  // Every lane's reads of the stage come before lane 0's arrival (the producer overwrites it).
  auto release = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  typename GradAccOf<M>::type pg{};
  mbar_wait(sm.kv_full(), kv.phase);
  for (int s = 0; s < b.n_steps; ++s) {
    const int h = b.head(s), q0 = b.q0(s, BM), buf = st.stage;
    M mod = mod0;
    mod.bind(h, b.tile.doc);
    const uint32_t q_s = sm.q(buf), do_s = sm.dout(buf), ds_s = sm.ds(buf);
    const bool full = bwd::step_full<BM>(p, b.doc, q0, b.j0, T::kBlockN);
    mbar_wait(sm.step_full(buf), st.phase);
    float2 l2[SP][NH], dl2[SP][NH];
    float st_[SP][NH][4], dpt[SP][NH][4];
    wg_fence();
#pragma unroll
    for (int hf = 0; hf < SP; ++hf) {
#pragma unroll
      for (int kd = 0; kd < KD; ++kd)
        wgmma_ss<0>(st_[hf], desc_k_major(sm.k(), T::kBlockN, kd, cw * 64),
                    desc_k_major(q_s, BM, kd, hf * PQ), kd);
#pragma unroll
      for (int kd = 0; kd < KD; ++kd)
        wgmma_ss<0>(dpt[hf], desc_k_major(sm.v(), T::kBlockN, kd, cw * 64),
                    desc_k_major(do_s, BM, kd, hf * PQ), kd);
      wg_commit();
    }
    uint32_t ap[SP][KH][4], as[SP][KH][4];
    float dq[NDQ][4];
    // dQ (BM queries x this warpgroup's kDqCols columns) = dS K over the tile's keys: A is
    // dS^T read M-major, B the K tile's columns from dq_c0 read N-major.
    auto dq_product = [&] {
      fence_proxy_async();
      named_sync(T::kDsBarrier, T::kConsumerThreads);  // every warp's rows of dS^T written
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < T::kBlockN / 16; ++kk)
        wgmma_ss<1, 1>(dq, desc_at(sw128_desc(ds_s, 1024, 1024), kk * 2048),
                       desc_mn_major(k_dq, T::kBlockN, kk), kk);
      wg_commit();
    };
#pragma unroll
    for (int hf = 0; hf < SP; ++hf) {
      bwd::load_lse_delta(l2[hf], dl2[hf], sm.lse_rows(buf), sm.delta_rows(buf), hf * PQ, t4);
      wg_wait<SP - 1>();  // this part's S^T, dP^T done (the next part's may still run)
      wg_hold(st_[hf]);
      wg_hold(dpt[hf]);
      bwd::p_ds<BM>(p, b.doc, b.tile, mod, full, q0, hf * PQ, t4, jr, st_[hf], dpt[hf], l2[hf],
                    dl2[hf], pg);
#pragma unroll
      for (int kk = 0; kk < KH; ++kk) {
        c_to_a(ap[hf][kk], st_[hf][2 * kk], st_[hf][2 * kk + 1]);
        c_to_a(as[hf][kk], dpt[hf][2 * kk], dpt[hf][2 * kk + 1]);
        if constexpr (kDq)
          bwd::store_ds_t<BM>(ds_s, warp * 16 + g, hf * PQ + kk * 16, t4, as[hf][kk]);
      }
      if constexpr (kDq)
        if (hf == SP - 1) dq_product();  // ahead of the last part's dV, dK products
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < KH; ++kk)
        wgmma_rs<1>(acc.dv, ap[hf][kk], desc_mn_major(do_s, BM, hf * KH + kk));
#pragma unroll
      for (int kk = 0; kk < KH; ++kk)
        wgmma_rs<1>(acc.dk, as[hf][kk], desc_mn_major(q_s, BM, hf * KH + kk));
      wg_commit();
    }
    if constexpr (kDq) {
      wg_wait<1>();  // dQ's product done; the last part's dV, dK products may run on
      wg_hold(dq);
      // dQ into the shared f32 tile (box = 32 columns), once the dQ warp's TMA has read the
      // previous step's.
      if (!first_dq) named_sync(T::kDqEmpty, T::kDqThreads);
      first_dq = false;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = lw * 16 + g + 8 * r;
#pragma unroll
        for (int n = 0; n < NDQ; ++n) {
          const int col = dq_c0 + n * 8 + 2 * t4;
          const uint32_t at = sm.dq() + (col >> 5) * T::kDqBoxBytes + row * 128 +
                              ((((col & 31) >> 2) ^ (row & 7)) << 4) + (t4 & 1) * 8;
          asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(dq[n][2 * r]),
                       "f"(dq[n][2 * r + 1])
                       : "memory");
        }
      }
      fence_proxy_async();
      named_arrive(T::kDqFull, T::kDqThreads);
    }
    wg_wait<0>();
    wg_hold(acc.dv);
    wg_hold(acc.dk);
    release(sm.step_empty(buf));
    st.advance();
  }
  release(sm.kv_empty());
  kv.advance();
}

}  // namespace driftless::layers::gpu::fast::sm90
