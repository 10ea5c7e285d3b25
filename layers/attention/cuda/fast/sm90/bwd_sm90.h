// The sm_90a dK/dV pass of the atomic-dQ attention backward (bwd_sm90.cu), which
// fast_backward.cu runs in place of fast_dkv.cuh's kernel where it applies.
#pragma once
#include "layers/attention/cuda/fast/fast_attention.h"

namespace driftless::layers::gpu::fast::sm90 {

// True where the sm_90a dK/dV kernel takes the atomic-dQ pass of p (a built-in modifier's):
// head dims 64 and 128, grouped heads included, where it is measured faster than
// fast_dkv.cuh's two-warpgroup kernel (BENCHMARKS.md, the sm_90a dK/dV kernel's dynamic
// item order). DRIFTLESS_ATTN_BWD_SM90=0 (read once) turns it off. Its key tiles are 128
// keys (dkv_block_k) at both head dims.
bool dkv_atomic_runs(const Problem& p);

// dk, dv (rows of dkv_heads heads) and the f32 sums dq_acc (T_q, H, D; zeroed, added to) of
// the built-in modifier M over the key tiles (k_tiles_by_head's, 128 keys, on the device), at
// head dim D.
template <int D, class M>
void dkv_atomic(const Problem& p, const M& mod, const Tile* tiles, int n_tiles, const void* dout,
                const float* lse, const float* delta, void* dk, void* dv, int dkv_heads,
                float* dq_acc);

}  // namespace driftless::layers::gpu::fast::sm90
