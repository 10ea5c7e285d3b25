// The sm_90a forward kernel of the fast attention (fwd_sm90.cu launches it; see there for its
// structure), as a device-only header: nvcc instantiates it for the built-in modifiers,
// NVRTC (layers/attention/jit/) for a user expression's ModExpr.
#pragma once
#include "engine/core/cuda/launch.cuh"
#include "layers/attention/cuda/fast/sm90/fwd_epilogue.cuh"

namespace driftless::layers::gpu::fast::sm90 {

template <class T, class M, bool kLin>
__global__ void __launch_bounds__(T::kThreads, 1)
    forward_kernel(const __grid_constant__ FwdMaps maps, Problem p, M mod, const Tile* tiles,
                   int n_items, bf16* out, float* lse) {
  cuda::dependent_kernel_begin();
  constexpr int D = T::kD;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const FwdSmem<T> sm{smem_u32(align_smem(smem_raw))};
  if (threadIdx.x == 0) sm.init();
  __syncthreads();
  const StaticScheduler sched{n_items};
  const int wg = int(threadIdx.x) / 128;
  if (wg == 0) {
    regs_dec<T::kProducerRegs>();
    if (threadIdx.x < 32)
      produce<T, NarrowsTiles<M>::value>(maps, p, tiles, sched, sm, int(threadIdx.x));
    return;
  }
  regs_inc<T::kConsumerRegs>();
  const int cw = wg - 1;
  // The ping-pong starts with consumer 0: consumer 1 arrives for it once.
  if (T::kPingpong && cw == 1) named_arrive(T::kSchedBarrier, 2 * 128);
  PipeState<T::kQStages> qs;
  PipeState<T::kKvStages> ks, vs;
  for (int w = sched.first(); sched.valid(w); w = sched.next(w)) {
    const ItemInfo b =
        ItemInfo::make<T::kBlockM, T::kBlockN, NarrowsTiles<M>::value>(p, tiles, w);
    M m = mod;
    m.bind(b.h, b.doc_index);
    FwdAccum<D> acc;
    consume<T, M, kLin>(p, b, m, sm, cw, qs, ks, vs, acc);
    store_rows<D>(p, b, cw, acc, out, lse);
  }
}

}  // namespace driftless::layers::gpu::fast::sm90
