// The sm_90a dK/dV pass of the atomic-dQ attention backward (bwd_sm90.cu), which
// fast_backward.cu runs in place of mma_sync/fast_dkv.cuh's kernel where it applies.
#pragma once
#include <vector>

#include "layers/attention/cuda/fast/fast_attention.h"

namespace driftless::layers::gpu::fast::sm90 {

// True where the sm_90a dK/dV kernel takes the atomic-dQ pass of p with the modifier mod: a
// built-in one (not an expression) on the wgmma kernels (use_wgmma: an sm_90a device and
// build) at head dims 64 and 128, grouped heads included, where it is measured faster than
// mma_sync/fast_dkv.cuh's two-warpgroup kernel (BENCHMARKS.md): not softcap at head dim 64, where
// mma_sync/fast_dkv.cuh's is (8 documents in 8192 tokens: 202 against 181 TFLOP/s).
// DRIFTLESS_ATTN_BWD_SM90=0 (read once) turns it off. Its key tiles are 128 keys
// (dkv_block_k) at both head dims.
bool dkv_atomic_runs(const Problem& p, ModKind mod);

// True where the deterministic backward of p takes its dK/dV from the sm_90a kernel without
// dQ (dkv_atomic with dq_acc null; the dQ kernel computes dQ): dkv_atomic_runs(p, mod)
// and DRIFTLESS_ATTN_BWD_SM90_DKV=1 (read once). Its key tiles are 128 keys, in
// k_tiles_by_head's order with every run heaviest first. dk and dv have the bits of fast_dkv's
// deterministic kernel (the same query steps and products: AttentionFast.AtomicDq*).
bool dkv_det_runs(const Problem& p, ModKind mod);

// True where the deterministic backward of p may take the sm_90a kernel with the ordered dQ
// (dkv_atomic with dq_counters): DRIFTLESS_ATTN_BWD_SM90_DET=1, 2 or 3 (read once; opt-in:
// slower than the dQ kernel on long documents, BENCHMARKS.md; ordered_dq_group_tiles),
// dkv_atomic_runs(p, mod), and every key tile of docs starts its query steps on its
// document's 64-row grid (causal documents with k_len - q_len a multiple of 64, e.g. without
// past keys), so that the tiles' steps share the blocks the reductions are ordered in.
bool dkv_ordered_runs(const Problem& p, ModKind mod, const std::vector<Doc>& docs);
// The grid condition of dkv_ordered_runs alone: every key tile's first query row is a
// multiple of 64 in its document.
bool ordered_dq_fits(const Problem& p, const std::vector<Doc>& docs);
// The schedule's group_tiles (k_tiles_by_head_descending): 0 with DRIFTLESS_ATTN_BWD_SM90_DET=1
// (each run whole in turn), the device's SM count with =2 (runs interleaved in groups), every
// run in one group with =3 (the list ends on the runs' bottom tiles, all of them heavy, so
// the last CTAs finish together).
int64_t ordered_dq_group_tiles();
// Ints of dkv_atomic's dq_counters for p over `documents` documents.
int64_t ordered_dq_counters(const Problem& p, int64_t documents);

// dk, dv (rows of dkv_heads heads) and the f32 sums dq_acc (T_q, H, D; zeroed, added to) of
// the built-in modifier M over the key tiles (128 keys, on the device), at head dim D.
// dq_acc null (dq_counters null too): dk and dv only (dkv_det_runs), tiles k_tiles_by_head's.
// dq_counters null: the tiles are k_tiles_by_head's and the dQ adds come in any order (their
// bits vary from run to run). Else ordered_dq_counters(p, documents) zeroed ints, the tiles
// k_tiles_by_head_descending's, and every dQ row's adds come in one order (deterministic;
// bwd_mainloop.cuh ordered_dq_*).
template <int D, class M>
void dkv_atomic(const Problem& p, const M& mod, const Tile* tiles, int n_tiles, const void* dout,
                const float* lse, const float* delta, void* dk, void* dv, int dkv_heads,
                float* dq_acc, int* dq_counters = nullptr);

}  // namespace driftless::layers::gpu::fast::sm90
