// The sm_90a dK/dV kernel of the atomic-dQ backward (FlashAttention-3's backward dataflow): a
// persistent kernel, one CTA per SM, whose producer warp streams K, V and each query step's
// Q, dO, lse and delta into mbarrier-guarded buffers, while two consumer warpgroups run the
// products on wgmma and a dQ warp adds each step's dQ to the f32 sums by TMA reductions
// (bwd_mainloop.cuh). Items are k_tiles_by_head's key tiles, which the CTAs take in order as
// each finishes one (bwd_mainloop.cuh ItemRing, over a counter zeroed before each launch);
// constants are in bwd_traits.cuh.
#include "layers/attention/cuda/fast/sm90/bwd_sm90.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/launch.cuh"
#include "engine/core/env.h"
#include "layers/attention/cuda/fast/sm90/bwd_kernel.cuh"
#include "layers/attention/cuda/fast/sm90/tensor_maps.h"

namespace driftless::layers::gpu::fast::sm90 {

bool dkv_atomic_runs(const Problem& p, ModKind mod) {
  static const std::string mode = env_value("DRIFTLESS_ATTN_BWD_SM90");
  const int64_t head_dim = p.head_dim;
  if (mode == "0" || !use_wgmma() || mod == ModKind::expression ||
      mod == ModKind::relative_position)
    return false;
  return head_dim == 128 || (head_dim == 64 && mod != ModKind::softcap);
}

bool dkv_det_runs(const Problem& p, ModKind mod) {
  static const bool on = env_value("DRIFTLESS_ATTN_BWD_SM90_DKV") == "1";
  return on && dkv_atomic_runs(p, mod);
}

bool ordered_dq_fits(const Problem& p, const std::vector<Doc>& docs) {
  using T = BwdTraits<128>;
  for (const Doc& d : docs) {
    const int64_t wr = window_in_32_bits(p.window_right, d.q_len, d.k_len);
    for (int64_t j0 = 0; j0 < d.k_len; j0 += T::kBlockN)  // query_steps's first row of a tile
      if (first_visible_query<int64_t>(j0, d.q_len, d.k_len, p.causal, wr) % T::kBlockM != 0)
        return false;
  }
  return true;
}

namespace {
const std::string& ordered_dq_mode() {
  static const std::string mode = env_value("DRIFTLESS_ATTN_BWD_SM90_DET");
  return mode;
}
}  // namespace

bool dkv_ordered_runs(const Problem& p, ModKind mod, const std::vector<Doc>& docs) {
  const std::string& mode = ordered_dq_mode();
  return (mode == "1" || mode == "2" || mode == "3") && dkv_atomic_runs(p, mod) &&
         ordered_dq_fits(p, docs);
}

int64_t ordered_dq_group_tiles() {
  const std::string& mode = ordered_dq_mode();
  return mode == "2" ? sm_count() : mode == "3" ? INT64_MAX : 0;
}

int64_t ordered_dq_counters(const Problem& p, int64_t documents) {
  return (p.t_q / BwdTraits<128>::kBlockM + documents + 1) * p.heads;
}

namespace {

// The launches' item counter of the current device, zeroed before each launch on the compute
// stream the launch follows. One int a device, allocated once.
int* item_counter() {
  constexpr int kMaxDevices = 64;
  static int* counters[kMaxDevices] = {};
  int dev = 0;
  DL_CUDA_CHECK(cudaGetDevice(&dev));
  DL_CHECK(dev < kMaxDevices, "attention", "device " << dev << " of more than " << kMaxDevices);
  if (counters[dev] == nullptr) DL_CUDA_CHECK(cudaMalloc(&counters[dev], sizeof(int)));
  return counters[dev];
}

}  // namespace

template <int D, class M>
void dkv_atomic(const Problem& p, const M& mod, const Tile* tiles, int n_tiles, const void* dout,
                const float* lse, const float* delta, void* dk, void* dv, int dkv_heads,
                float* dq_acc, int* dq_counters) {
  using T = BwdTraits<D>;
  DL_CHECK(p.head_dim == T::kD, "attention",
           "the sm_90a dK/dV kernel of head dim " << D << " called at " << p.head_dim);
  if (n_tiles == 0) return;
  BwdMaps maps{};
  encode_rows_map(maps.q, p.q, p.t_q, p.heads, p.q_row_heads, T::kD, T::kBlockM);
  encode_rows_map(maps.dout, dout, p.t_q, p.heads, p.heads, T::kD, T::kBlockM);
  encode_rows_map(maps.k, p.k, p.t_k, p.kv_heads, p.k_row_heads, T::kD, T::kBlockN);
  encode_rows_map(maps.v, p.v, p.t_k, p.kv_heads, p.v_row_heads, T::kD, T::kBlockN);
  DL_CHECK(dq_acc != nullptr || dq_counters == nullptr, "attention",
           "the ordered dQ of the sm_90a kernel without its dQ sums");
  if (dq_acc != nullptr) encode_f32_rows_map(maps.dq, dq_acc, p.t_q, p.heads, T::kD, T::kBlockM);
  // 0: the atomic dQ, 1: the ordered dQ, 2: dK and dV only
  const int variant = dq_acc == nullptr ? 2 : dq_counters != nullptr ? 1 : 0;
  auto kernel = variant == 2   ? dkv_dq_kernel<T, M, false, false>
                : variant == 1 ? dkv_dq_kernel<T, M, true, true>
                               : dkv_dq_kernel<T, M, false, true>;
  static bool configured[3] = {};
  if (!configured[variant]) {
    DL_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmem));
    configured[variant] = true;
  }
  const unsigned grid = unsigned(std::min(n_tiles, sm_count()));
  int* counter = item_counter();
  DL_CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(int), cuda::compute_stream()));
  cuda::launch(kernel, grid, unsigned(T::kThreads), size_t(T::kSmem), maps, p, mod, tiles, n_tiles,
               counter, dq_counters, static_cast<const bf16*>(dout), lse, delta, static_cast<bf16*>(dk),
               static_cast<bf16*>(dv), dkv_heads);
  DL_CUDA_LAUNCH_CHECK();
}

#define DL_DKV_ATOMIC(D, M)                                                                     \
  template void dkv_atomic<D, M>(const Problem&, const M&, const Tile*, int, const void*,       \
                                 const float*, const float*, void*, void*, int, float*, int*);
DL_DKV_ATOMIC(128, ModNone)
DL_DKV_ATOMIC(128, ModSoftcap)
DL_DKV_ATOMIC(128, ModAlibi)
DL_DKV_ATOMIC(64, ModNone)
DL_DKV_ATOMIC(64, ModSoftcap)
DL_DKV_ATOMIC(64, ModAlibi)
#undef DL_DKV_ATOMIC

}  // namespace driftless::layers::gpu::fast::sm90
