// Forward of the fast attention (fast_attention.h) on mma.sync, FlashAttention-2 style (on
// Hopper, sm90/fwd_sm90.cu runs instead): one CTA per (128-row query tile of a document,
// head); each warp owns 16 or 32 query rows (Cfg) and runs the online softmax (log2 domain)
// over key tiles that are double-buffered through cp.async. Key tiles no row of the tile
// sees are never visited; the element mask runs only on tiles that cut a row's visible range
// (causal diagonal, window edges, partial tiles). Rows past the document's end are zero-filled on
// load and never stored.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/launch.cuh"
#include "engine/core/env.h"
#include "layers/attention/cuda/fast/fast_common.cuh"
#include "layers/attention/cuda/fast/mma_sync/forward_kernel.cuh"
#include "layers/attention/cuda/fast/sm90/fwd_sm90.h"

namespace driftless::layers::gpu::fast {
namespace {

using fwd::Cfg;
using fwd::forward_kernel;

__global__ void fill_kernel(float* x, int64_t n, float value) {
  cuda::dependent_kernel_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = value;
}

// Grid, block and shared memory of forward_kernel<D, M, *>: one CTA per (tile, head).
template <int D, class M>
Geometry geometry(const Problem& p, int n_tiles) {
  return {unsigned(int64_t(n_tiles) * p.heads), unsigned(Cfg<D, M>::kThreads), Cfg<D, M>::kSmem};
}

template <int D, class M, bool kLin>
void launch_as(const Problem& p, const M& mod, const Tile* tiles, int n_tiles, void* out,
               float* lse) {
  const Geometry g = geometry<D, M>(p, n_tiles);
  static bool configured = false;
  if (!configured) {
    DL_CUDA_CHECK(cudaFuncSetAttribute(forward_kernel<D, M, kLin>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, g.smem));
    configured = true;
  }
  cuda::launch(forward_kernel<D, M, kLin>, g.grid, g.block, size_t(g.smem), p, mod, tiles,
               static_cast<bf16*>(out), lse);
  DL_CUDA_LAUNCH_CHECK();
}

template <int D, class M>
void launch(const Problem& p, const M& mod, const Tile* tiles, int n_tiles, void* out, float* lse) {
  if constexpr (std::is_same_v<M, ModNone>) {
    if (mod.scale_log2 > 0.f) return launch_as<D, M, true>(p, mod, tiles, n_tiles, out, lse);
  }
  launch_as<D, M, false>(p, mod, tiles, n_tiles, out, lse);
}

void fill_f32(float* x, int64_t n, float value) {
  if (n <= 0) return;
  cuda::launch(fill_kernel, unsigned(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0, x, n,
               value);
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool use_wgmma() {
  static const bool on = [] {
#ifdef DRIFTLESS_SM90A
    if (env_value("DRIFTLESS_ATTN_WGMMA") == "0") return false;
    int dev = 0, major = 0, minor = 0;
    DL_CUDA_CHECK(cudaGetDevice(&dev));
    DL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    DL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    return major == 9 && minor == 0;
#else
    return false;
#endif
  }();
  return on;
}

bool supported(const Problem& p, const Mod& mod) {
  return p.bf16 && (p.head_dim == 64 || p.head_dim == 128) &&
         (mod.kind == ModKind::none || mod.kind == ModKind::softcap || mod.kind == ModKind::alibi);
}

namespace {

// forward()'s steps before its kernel (padded rows, and every row where there are no keys,
// written); false when no kernel is left to launch.
bool forward_prologue(const Problem& p, int n_tiles, bool padded, void* out, float* lse) {
  if (p.t_q == 0 || p.heads == 0) return false;
  // With no key at all every row sees nothing (and the sm_90a kernel's TMA maps need rows).
  const bool no_keys = p.t_k == 0;
  if (padded || no_keys) {
    DL_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(p.t_q * p.heads * p.head_dim) * 2));
    fill_f32(lse, p.t_q * p.heads, -INFINITY);
  }
  return n_tiles > 0 && !no_keys;
}

}  // namespace

void forward(const Problem& problem, const Mod& mod, const Tile* tiles, int n_tiles, bool padded,
             void* out, float* lse) {
  const Problem p = with_row_strides(problem);
  if (!forward_prologue(p, n_tiles, padded, out, lse)) return;
  if (use_wgmma()) return sm90::forward(p, mod, tiles, n_tiles, out, lse);
  dispatch_mod(p, mod, [&](auto m) {
    using Mf = decltype(m);
    if (p.head_dim == 64)
      launch<64, Mf>(p, m, tiles, n_tiles, out, lse);
    else
      launch<128, Mf>(p, m, tiles, n_tiles, out, lse);
  });
}

void forward_with(const Problem& problem, const ModLauncher& launch, const Tile* tiles,
                  int n_tiles, bool padded, void* out, float* lse) {
  const Problem p = with_row_strides(problem);
  if (!forward_prologue(p, n_tiles, padded, out, lse)) return;
  if (use_wgmma()) return sm90::forward_with(p, launch, tiles, n_tiles, out, lse);
  ForwardArgs a;
  a.p = p;
  a.tiles = tiles;
  a.out = out;
  a.lse = lse;
  // A user modifier's tiles are softcap's where it is heavy, else every other built-in's (Cfg).
  if (launch.heavy)
    launch.forward(p.head_dim == 64 ? geometry<64, ModSoftcap>(p, n_tiles)
                                    : geometry<128, ModSoftcap>(p, n_tiles),
                   a);
  else
    launch.forward(p.head_dim == 64 ? geometry<64, ModAlibi>(p, n_tiles)
                                    : geometry<128, ModAlibi>(p, n_tiles),
                   a);
}

}  // namespace driftless::layers::gpu::fast
