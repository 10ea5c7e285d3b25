// The sm_90a attention forward (FlashAttention-3's structure): a persistent kernel, one CTA per
// SM, whose producer warp streams Q, K and V tiles by TMA into mbarrier-guarded rings while
// two consumer warpgroups run the products on wgmma (fwd_mainloop.cuh), then store O and the
// LSE (fwd_epilogue.cuh). Items come from the host's heaviest-first tile schedule
// (tile_scheduler.cuh); constants are in fwd_traits.cuh. Same contract as fast_forward.cu.
#include <algorithm>
#include <type_traits>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/launch.cuh"
#include "layers/attention/cuda/fast/sm90/fwd_kernel.cuh"
#include "layers/attention/cuda/fast/sm90/fwd_sm90.h"
#include "layers/attention/cuda/fast/sm90/tensor_maps.h"

namespace driftless::layers::gpu::fast::sm90 {
namespace {

// The tensor maps and the launch geometry of forward_kernel<T, *, *>: a persistent grid of at
// most one CTA per SM.
template <class T>
FwdMaps make_maps(const Problem& p) {
  FwdMaps maps;
  encode_rows_map(maps.q, p.q, p.t_q, p.heads, p.q_row_heads, T::kD, T::kBlockM);
  encode_rows_map(maps.k, p.k, p.t_k, p.kv_heads, p.k_row_heads, T::kD, T::kBlockN);
  encode_rows_map(maps.v, p.v, p.t_k, p.kv_heads, p.v_row_heads, T::kD, T::kBlockN);
  return maps;
}
template <class T>
Geometry geometry(const Problem& p, int n_tiles) {
  const int64_t n_items = int64_t(n_tiles) * p.heads;
  return {unsigned(std::min<int64_t>(n_items, sm_count())), unsigned(T::kThreads), T::kSmem};
}

template <class T, class M, bool kLin>
void launch_as(const Problem& p, const M& mod, const Tile* tiles, int n_tiles, void* out,
               float* lse) {
  const FwdMaps maps = make_maps<T>(p);
  const Geometry g = geometry<T>(p, n_tiles);
  static bool configured = false;
  if (!configured) {
    DL_CUDA_CHECK(cudaFuncSetAttribute(forward_kernel<T, M, kLin>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, g.smem));
    configured = true;
  }
  cuda::launch(forward_kernel<T, M, kLin>, g.grid, g.block, size_t(g.smem), maps, p, mod, tiles,
               int(int64_t(n_tiles) * p.heads), static_cast<bf16*>(out), lse);
  DL_CUDA_LAUNCH_CHECK();
}

// The sm90 forward of a user modifier, through `launch` (its tiles are those of every
// built-in but softcap: FwdConfig).
template <class T>
void launch_with(const Problem& p, const ModLauncher& launch, const Tile* tiles, int n_tiles,
                 void* out, float* lse) {
  const FwdMaps maps = make_maps<T>(p);
  ForwardArgs a;
  a.p = p;
  a.maps = &maps;
  a.maps_bytes = int(sizeof(FwdMaps));
  a.tiles = tiles;
  a.n_items = int(int64_t(n_tiles) * p.heads);
  a.out = out;
  a.lse = lse;
  launch.forward(geometry<T>(p, n_tiles), a);
}

}  // namespace

void forward(const Problem& p, const Mod& mod, const Tile* tiles, int n_tiles, void* out,
             float* lse) {
  dispatch_mod(p, mod, [&](auto m) {
    using Mf = decltype(m);
    auto run = [&](auto d) {
      constexpr int D = decltype(d)::value;
      using T = FwdConfig<D, Mf>;
      if constexpr (std::is_same_v<Mf, ModNone>) {
        if (m.scale_log2 > 0.f) return launch_as<T, Mf, true>(p, m, tiles, n_tiles, out, lse);
      }
      launch_as<T, Mf, false>(p, m, tiles, n_tiles, out, lse);
    };
    if (p.head_dim == 64)
      run(std::integral_constant<int, 64>{});
    else
      run(std::integral_constant<int, 128>{});
  });
}

void forward_with(const Problem& p, const ModLauncher& launch, const Tile* tiles, int n_tiles,
                  void* out, float* lse) {
  // The configuration the program's kernel was instantiated with (FwdConfig<D, ModExpr<U>>).
  if (p.head_dim == 64 && launch.heavy)
    launch_with<FwdConfig<64, ModSoftcap>>(p, launch, tiles, n_tiles, out, lse);
  else if (p.head_dim == 64)
    launch_with<FwdConfig<64, ModAlibi>>(p, launch, tiles, n_tiles, out, lse);
  else if (launch.heavy)
    launch_with<FwdConfig<128, ModSoftcap>>(p, launch, tiles, n_tiles, out, lse);
  else
    launch_with<FwdConfig<128, ModAlibi>>(p, launch, tiles, n_tiles, out, lse);
}

}  // namespace driftless::layers::gpu::fast::sm90
