// The sm_90a dK/dV kernel with the dQ added by TMA reductions, unordered (the atomic dQ) or
// kOrdered (the deterministic one: bwd_mainloop.cuh ordered_dq_*), or without dQ (kDq false:
// the deterministic backward's dK/dV beside the dQ kernel), launched by bwd_sm90.cu;
// bwd_mainloop.cuh holds its roles. A device-only header.
#pragma once
#include "engine/core/cuda/launch.cuh"
#include "layers/attention/cuda/fast/sm90/bwd_mainloop.cuh"

namespace driftless::layers::gpu::fast::sm90 {

template <class T, class M, bool kOrdered, bool kDq>
__global__ void __launch_bounds__(T::kThreads, 1)
    dkv_dq_kernel(const __grid_constant__ BwdMaps maps, Problem p, M mod, const Tile* tiles,
                  int n_items, int* item_counter, int* dq_counters, const bf16* dout,
                  const float* lse, const float* delta, bf16* dk, bf16* dv, int dkv_heads) {
  cuda::dependent_kernel_begin();
  static_assert(!HasParamGrad<M>::value, "learnable tables take the dK/dV kernel of fast_dkv.cuh");
  static_assert(kDq || !kOrdered, "the ordered dQ adds dQ");
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = align_smem(smem_raw);
  const BwdSmem<T> sm{smem, smem_u32(smem)};
  if (threadIdx.x == 0) sm.init();
  __syncthreads();
  const int wg = int(threadIdx.x) / 128;
  if (wg == 0) {
    regs_dec<T::kProducerRegs>();
    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) & 31;
    if (warp == 0)
      bwd_produce<T, M>(maps, p, tiles, n_items, item_counter, sm, dout, lse, delta, lane);
    else if (warp == 1 && kDq)
      bwd_write_dq<T, M, kOrdered>(maps, p, tiles, n_items, sm, dq_counters, lane);
    else if (warp == 1)
      bwd_skip_items<T>(sm, n_items, lane);
    return;
  }
  regs_inc<T::kConsumerRegs>();
  const int cw = wg - 1, lane = int(threadIdx.x) & 31;
  // The thread's first key of the tile: 16 keys a consumer warp, rows g and g + 8 of them.
  const int key_row = (cw * 4 + (int(threadIdx.x) >> 5) % 4) * 16 + (lane >> 2);
  PipeState<1> kv;
  PipeState<T::kStages> st;
  bool first_dq = true;
  ItemRing<T> ring;
  for (int w = ring.take(sm, lane); w < n_items; w = ring.take(sm, lane)) {
    const BwdItem b = BwdItem::make<T, M>(p, tiles, w);
    BwdAccum<T::kD> acc;
    bwd_consume<T, M, kDq>(p, b, mod, sm, cw, kv, st, first_dq, acc);
    bwd::store_dkv<T::kD>(p, b.doc, b.j0, b.kh, b.nk, key_row, lane & 3, acc.dk, acc.dv, dk, dv,
                          dkv_heads);
  }
}

}  // namespace driftless::layers::gpu::fast::sm90
