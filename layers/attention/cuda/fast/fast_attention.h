// Launchers of the fast varlen attention (bf16 tensor cores through mma.sync m16n8k16 +
// ldmatrix, or wgmma on sm_90a; fp32 accumulation): forward (fast_forward.cu, on Hopper the
// TMA / warp-specialised sm90/fwd_sm90.cu) and a
// deterministic atomic-free backward (fast_backward.cu). Same contract as flash_cuda.h (which
// stays the fallback): bottom-right causal, windows, GQA without replication, padding written
// as zeros, LSE (H, T_q) fp32, modifiers none/softcap/ALiBi as compile-time functors.
// Plain pointers and POD structs only (nvcc compiles this as C++17).
#pragma once
#ifndef __CUDACC_RTC__
#include <functional>
#include <vector>
#endif

#include "layers/attention/cuda/flash_cuda.h"
#include "layers/attention/rtc_std.h"

namespace driftless::layers::gpu::fast {

// Tile sizes the host schedule must be built with.
// Longest document (query or key rows) the fast kernels take: they index rows in 32 bits,
// with sums of up to three lengths (row_keys).
constexpr int64_t kMaxDocLen = int64_t(1) << 29;
constexpr int kFwdBlockQ = 128;  // query rows per forward tile (fast_forward.cu, sm90/fwd_traits.cuh)
constexpr int kBwdBlockQ = 64;   // query rows per dK/dV inner step
// Query rows per dQ CTA (fast_backward.cu: 16 a warp; two warpgroups at D = 64 share each
// K/V tile).
template <int D>
struct DqRows {
  static constexpr int value = D <= 64 ? 128 : 64;
};
inline int dq_block_q(int64_t head_dim) {
  return head_dim <= 64 ? DqRows<64>::value : DqRows<128>::value;
}
constexpr int kBwdBlockK = 64;  // key rows per dK/dV warpgroup (4 warps x 16 rows)
// Shared memory of one learnable-table entry a dK/dV CTA keeps: its fixed-point sums hi and
// lo (param_grad.cuh), past the kernel's own bytes rounded up to 16.
constexpr int kGradSlotBytes = 16;

// One unit of work: `start` is a row offset inside document `doc` (q rows for the forward
// and dQ kernels, k rows for the dK/dV kernel); `head`: the kv head, in schedules that list
// the heads (k_tiles_by_head), else 0 and the kernels take the head from the block index.
// [lo, hi): the rows of the other dimension (keys of a query tile, queries of a key tile,
// document-relative) outside which a mask expression hides every pair of the tile
// (mask_narrow.h); a mask expression's kernels intersect their block loops with it
// (fast_common.cuh narrow_blocks, NarrowsTiles). The default narrows nothing.
// [vis_lo, vis_hi): rows of the other dimension, inside the document, where the mask shows
// every pair of the tile; a kernel block wholly inside it skips the mask expression's
// evaluation (fast_common.cuh with_visible_block). The default is empty. Seven int32s: the
// host copies tiles to the device as such (attention_cuda.cpp device_tiles).
constexpr int32_t kTileUnbounded = 0x7fffffff;
struct Tile {
  int32_t doc, start, head = 0;
  int32_t lo = 0, hi = kTileUnbounded;
  int32_t vis_lo = 0, vis_hi = 0;
};
constexpr int kTileInts = 7;
static_assert(sizeof(Tile) == kTileInts * sizeof(int32_t), "device_tiles lays tiles out as ints");
// Granularity of the host's narrowing of a tile's range (and of its visible range): it divides
// every kernel's block of the other dimension (forward keys 32, 64 or 128; dQ keys kBwdBlockK;
// dK/dV query steps kBwdBlockQ), so a range found on it, rounded out to a kernel's block, skips
// every block of that kernel the scan proved hidden whole (and finer: the dK/dV kernel's query grid
// is not anchored at multiples of its step).
constexpr int kNarrowBlock = 32;

#ifndef __CUDACC_RTC__  // the host side; NVRTC (jit/) compiles the device part only
// True when the fast kernels take this call: bf16, head_dim 64 or 128.
bool supported(const Problem& p, const Mod& mod);

// True when the kernels run their products on Hopper's wgmma (wgmma.cuh): built for sm_90a
// (DRIFTLESS_SM90A), the current device is compute 9.0, and DRIFTLESS_ATTN_WGMMA is not "0" (the
// switch that times or tests the mma.sync kernels on the same GPU). Read once per process.
bool use_wgmma();

// Host schedule (schedule.cpp): the tiles of every document, heaviest first (more visible
// keys, or queries, per tile), so the long causal tiles start early.
std::vector<Tile> q_tiles(const Problem& p, const std::vector<Doc>& docs, int block_q);
std::vector<Tile> k_tiles(const Problem& p, const std::vector<Doc>& docs, int block_k);
// The key tiles of every (document, kv head), one after another (longest documents first,
// heaviest tiles first within each): the schedule of the atomic dQ, whose f32 adds then
// land on the rows of a few (document, head) pairs at a time, which stay in L2, rather than
// on every row at once (measured: the adds otherwise ran at DRAM speed). But for the tail
// band: the fewest last runs that hold concurrent_ctas tiles are merged heaviest first, so
// the grid does not end on one run's heavy tiles while the rest of the GPU idles. 0: no band.
std::vector<Tile> k_tiles_by_head(const Problem& p, const std::vector<Doc>& docs, int block_k,
                                  int64_t concurrent_ctas = 0);
// The key tiles of every (document, kv head), longest documents first, each run's tiles by
// descending start (no tail band): the ordered dQ's schedule, in which a tile's dQ adds wait
// for those of the tiles above it (sm90/bwd_mainloop.cuh ordered_dq_*), so every tile a CTA
// waits for was taken before its own. group_tiles > 0: the runs in groups, the fewest next
// runs that hold group_tiles tiles, each group listed round by round (the top tile of each of
// its runs, then the next of each, ...), so the runs' heavy bottom tiles, which come last in
// each run, are spread over the group's end and not over the whole list's.
std::vector<Tile> k_tiles_by_head_descending(const Problem& p, const std::vector<Doc>& docs,
                                             int block_k, int64_t group_tiles = 0);
// How many dK/dV CTAs of the atomic dQ backward run at once on the current device (SMs x
// CTAs per SM for p's head dim and groups): k_tiles_by_head's concurrent_ctas; the int64_t
// maximum (every run in the band) for GQA at head dim 128 on the sm_90a kernel. mod: the
// call's modifier (ModKind::expression for a run-time compiled one, jit/), which decides
// whether the sm_90a kernel takes it (sm90/bwd_sm90.h dkv_atomic_runs).
int64_t atomic_dkv_concurrent_ctas(const Problem& p, ModKind mod);
// Key rows per dK/dV CTA, the block_k of k_tiles (the deterministic backward) and
// k_tiles_by_head (atomic: the atomic dQ's backward): kBwdBlockK, or 128 in the atomic mode on
// the wgmma kernels at D = 128 (two warpgroups a CTA; mma_sync/fast_dkv.cuh DkvWarpgroups, or the
// sm_90a kernel, sm90/bwd_sm90.h) and at D = 64 where the sm_90a kernel takes the call
// (dkv_atomic_runs with the call's modifier mod), and in the deterministic mode where the
// sm_90a kernel takes its dK/dV (sm90::dkv_det_runs; its tiles are k_tiles_by_head's).
int dkv_block_k(const Problem& p, bool atomic, ModKind mod);

// p with its row strides filled in (Problem::q_row_heads = H, k/v_row_heads = H_kv where 0:
// packed rows). The launchers below apply it; the kernels read the strides as given.
Problem with_row_strides(const Problem& p);

// tiles: device arrays. `padded`: some q (or k) rows belong to no document; those are
// zero-filled first (out 0, lse -inf; dq/dk/dv 0). Every launch goes to the default stream.
void forward(const Problem& p, const Mod& mod, const Tile* tiles, int n_tiles, bool padded,
             void* out, float* lse);
// Row strides of the gradients, counted in heads (a row of dq is dq_heads * head_dim
// elements); 0: packed (H and H_kv). Wider rows let dq, dk and dv be column blocks of one
// buffer laid out like the fused QKV product, which is then its gradient with no copy.
struct OutRows {
  int dq_heads = 0, dkv_heads = 0;
};

// delta: (H * T_q) f32 scratch. dq_acc: null, or (T_q * H * D) f32 scratch for the
// non-deterministic backward: where atomic_dq() holds, the dK/dV kernel then also computes
// dQ and sums it into dq_acc with atomic adds (no dQ kernel; the bits of dq vary from run to
// run), and k_tiles must be k_tiles_by_head's; elsewhere dq_acc is ignored and the
// deterministic kernels run. dq_counters (with dq_acc, where sm90::dkv_ordered_runs holds):
// sm90::ordered_dq_counters(p, documents) zeroed ints, k_tiles k_tiles_by_head_descending's,
// and the adds to dq_acc come in one order (deterministic), with no dQ kernel.
void backward(const Problem& p, const Mod& mod, const Tile* q_tiles, int n_q_tiles,
              const Tile* k_tiles, int n_k_tiles, bool q_padded, bool k_padded, const void* out,
              const void* dout, const float* lse, float* delta, void* dq, void* dk, void* dv,
              OutRows rows = {}, float* dq_acc = nullptr, int* dq_counters = nullptr);

// True when backward() takes a dq_acc (the wgmma kernels run).
inline bool atomic_dq() { return use_wgmma(); }

// The same launches with the modifier-dependent kernels launched by the caller: the run-time
// compiled kernels of a user expression (layers/attention/jit/). The padding, delta and
// atomic-dQ steps, the order, and each kernel's grid, block and shared memory are forward()'s
// and backward()'s (those of a modifier other than the built-in softcap, whose tiles differ);
// the caller launches the named kernel with these arguments and its modifier (the kernel's
// `M mod` parameter, second, or third after the sm90 forward's tensor maps).
struct Geometry {
  unsigned grid = 0, block = 0;
  int smem = 0;  // dynamic shared memory, bytes
};
struct ForwardArgs {  // mma_sync/forward_kernel.cuh, or sm90/fwd_kernel.cuh where maps != null
  Problem p;
  const void* maps = nullptr;  // sm90: the FwdMaps (3 x 128-byte tensor maps)
  int maps_bytes = 0;
  const Tile* tiles = nullptr;
  int n_items = 0;  // sm90 only
  void* out = nullptr;
  float* lse = nullptr;
};
struct DqArgs {  // mma_sync/fast_dq.cuh dq_kernel
  Problem p;
  const Tile* tiles = nullptr;
  const void *dout = nullptr, *out = nullptr;
  const float* lse = nullptr;
  float* delta = nullptr;
  void* dq = nullptr;
  int dq_heads = 0;
};
struct DkvArgs {  // mma_sync/fast_dkv.cuh dkv_kernel; atomic: the kDq = true instance
  Problem p;
  const Tile* tiles = nullptr;
  const void* dout = nullptr;
  const float *lse = nullptr, *delta = nullptr;
  void *dk = nullptr, *dv = nullptr;
  int dkv_heads = 0;
  float* dq_acc = nullptr;
  int* dq_counters = nullptr;  // the ordered dQ's (sm90/bwd_sm90.h dkv_atomic)
  int n_tiles = 0;             // tiles' length
  bool atomic = false;
};
struct ModLauncher {
  bool heavy = false;  // the modifier is a HeavyMod (fast_common.cuh): softcap's forward tiles
  std::function<void(const Geometry&, const ForwardArgs&)> forward;
  std::function<void(const Geometry&, const DqArgs&)> dq;
  std::function<void(const Geometry&, const DkvArgs&)> dkv;
};
void forward_with(const Problem& p, const ModLauncher& launch, const Tile* tiles, int n_tiles,
                  bool padded, void* out, float* lse);
void backward_with(const Problem& p, const ModLauncher& launch, const Tile* q_tiles,
                   int n_q_tiles, const Tile* k_tiles, int n_k_tiles, bool q_padded,
                   bool k_padded, const void* out, const void* dout, const float* lse,
                   float* delta, void* dq, void* dk, void* dv, OutRows rows = {},
                   float* dq_acc = nullptr);
#endif

}  // namespace driftless::layers::gpu::fast
