// Backward of the fast attention (fast_attention.h), FlashAttention-2 style. By default without
// atomics, so every gradient element is summed by one thread in a fixed order:
//   delta_kernel  delta = rowsum(dO * O) per (q row, head), on tensor cores (see there), for
//                 the mma.sync kernels; the wgmma dq_kernel computes it itself and writes it;
//   dkv_kernel    one CTA per (64-key tile of a document, kv head); each of its 4 warps owns
//                 16 keys, computes S^T and dP^T for every query head of the GQA group and
//                 every 64-row query tile that sees the keys, and accumulates dV += P^T dO,
//                 dK += dS^T Q in registers (the group's reduction happens in the CTA);
//                 in the atomic mode at D = 128 (wgmma), 128 keys and two warpgroups;
//   dq_kernel     one CTA per (query tile of DqRows<D> rows, head), 16 rows a warp,
//                 recomputing P over the visible key tiles: dQ += dS K. Runs before dkv_kernel,
//                 which reads the delta it wrote.
// The products run as mma.sync per warp, or (W, sm_90a) as wgmma per warpgroup of 4 warps,
// whose accumulator rows per warp are the same 16, in two software-pipelined halves per step.
// dS = P * (dP - delta) * d value / d score; the softmax scale is applied once at the end.
// dQ = dS K takes dS as a bf16 head plus tail (two products): dS of a row sums to ~0, so
// dQ is a cancelling sum and one bf16 rounding of dS alone put its error at ~2x the CPU's.
// The non-deterministic backward (a dq_acc given, wgmma only) runs delta_kernel, then
// dkv_kernel<..., kDq = true>, which also computes dQ = dS K of every step and adds it to
// dq_acc with vector atomic adds, over k_tiles_by_head's schedule, then dq_from_acc_kernel;
// no dq_kernel. Faster than the deterministic backward (BENCHMARKS.md). On sm_90a (head dims
// 64 and 128, grouped heads included, but softcap at 64), the built-in modifiers' dK/dV pass is
// sm90/bwd_sm90.cu's warp-specialised kernel instead (TMA loads, dQ added by TMA reductions;
// bwd_sm90.h dkv_atomic_runs). With DRIFTLESS_ATTN_BWD_SM90_DKV=1 the deterministic backward's
// dK/dV pass is the same kernel without its dQ part, after dq_kernel (bwd_sm90.h dkv_det_runs).
#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/launch.cuh"
#include "engine/core/env.h"
#include "layers/attention/cuda/fast/fast_common.cuh"
#include "layers/attention/cuda/fast/mma_sync/fast_dkv.cuh"
#include "layers/attention/cuda/fast/mma_sync/fast_dq.cuh"
#include "layers/attention/cuda/fast/sm90/bwd_sm90.h"
#include "layers/attention/cuda/fast/sm90/tensor_maps.h"
#include "layers/attention/cuda/fast/wgmma.cuh"

namespace driftless::layers::gpu::fast {
namespace {

using bwd::dkv_kernel;
using bwd::dq_kernel;
using bwd::kBK;
using bwd::kBQ;
using bwd::kThreads;

// delta[h * T_q + row] = sum_d dO * O, as the diagonal of the tensor-core product dO O^T
// over 16 rows per warp: the same mma, operand positions and k order as dP = dO V^T in the
// dQ kernel, so where O equals the one visible V row (a row that sees a single key) dP and
// delta are bitwise equal and dS is exactly 0, like the CPU path's. A warp's 16 rows of dO
// and O (contiguous) come in as 16-byte loads through shared memory, rows padded by 16
// bytes so the fragment reads hit 32 different banks. With dq_acc (the atomic dQ backward)
// the warp also zeroes the same 16 rows of that f32 (rows, D) buffer, which the dK/dV kernel
// then adds to: one pass instead of a separate memset of it.
template <int D>
constexpr int kDeltaWarps = D == 64 ? 8 : 4;  // 32 KiB of staged rows per block
template <int D>
__global__ void __launch_bounds__(32 * kDeltaWarps<D>)
    delta_kernel(int64_t rows, int64_t heads, int64_t t_q, const bf16* out, const bf16* dout,
                 float* delta, float* dq_acc) {
  cuda::dependent_kernel_begin();
  constexpr int kLd = D + 8, kUnits = 16 * D / 8;  // staged row stride; 16-byte units per tile
  __shared__ __align__(16) bf16 stage[kDeltaWarps<D>][2][16 * kLd];
  const int warp = threadIdx.x / 32;
  const int64_t r0 = (blockIdx.x * int64_t(kDeltaWarps<D>) + warp) * 16;
  if (r0 >= rows) return;
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  bf16* sdo = stage[warp][0];
  bf16* so = stage[warp][1];
  for (int u = lane; u < kUnits; u += 32) {
    const int row = u / (D / 8), c8 = u % (D / 8);
    const bool in = r0 + row < rows;
    const int64_t at = (r0 + row) * D + c8 * 8;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(sdo + row * kLd + c8 * 8) =
        in ? *reinterpret_cast<const uint4*>(dout + at) : zero;
    *reinterpret_cast<uint4*>(so + row * kLd + c8 * 8) =
        in ? *reinterpret_cast<const uint4*>(out + at) : zero;
  }
  if (dq_acc != nullptr) {
    const int64_t n4 = (min(rows - r0, int64_t(16)) * D) / 4;  // float4s of the warp's rows
    float4* z = reinterpret_cast<float4*>(dq_acc + r0 * D);
    for (int64_t u = lane; u < n4; u += 32) z[u] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  __syncwarp();
  const int64_t ra = r0 + g, rb = r0 + g + 8;  // rows of this lane (row * H + h)
  auto ld = [&](const bf16* x, int row, int col) -> uint32_t {
    return *reinterpret_cast<const uint32_t*>(x + row * kLd + col);
  };
  float c0[4] = {0.f, 0.f, 0.f, 0.f}, c1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd) {
    const int col = kd * 16 + 2 * t4;
    const uint32_t a[4] = {ld(sdo, g, col), ld(sdo, g + 8, col), ld(sdo, g, col + 8),
                           ld(sdo, g + 8, col + 8)};
    mma_bf16(c0, a, ld(so, g, col), ld(so, g, col + 8));          // O rows r0 .. r0 + 7
    mma_bf16(c1, a, ld(so, g + 8, col), ld(so, g + 8, col + 8));  // O rows r0 + 8 .. r0 + 15
  }
  // Diagonal: (g, g) sits in c0 of the lane with t4 == g / 2, (g + 8, g + 8) in c1.
  const int src = (lane & ~3) | (g >> 1);
  float d0[4], d1[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    d0[e] = __shfl_sync(0xffffffffu, c0[e], src);
    d1[e] = __shfl_sync(0xffffffffu, c1[e], src);
  }
  if (t4 == 0) {
    if (ra < rows) delta[(ra % heads) * t_q + ra / heads] = d0[g & 1];
    if (rb < rows) delta[(rb % heads) * t_q + rb / heads] = d1[2 + (g & 1)];
  }
}

// dq (rows of dq_heads heads) = bf16(acc * scale) for every (row, head) of acc (T_q, H, D)
// f32, 4 elements a thread: the atomic dQ's sums to the gradient's dtype and layout.
__global__ void dq_from_acc_kernel(const float* acc, int64_t n4, int64_t heads, int d, float scale,
                                   bf16* dq, int dq_heads) {
  cuda::dependent_kernel_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float4 a = reinterpret_cast<const float4*>(acc)[i];
    const int64_t e = 4 * i, row_head = e / d, col = e % d;
    const int64_t row = row_head / heads, h = row_head % heads;
    uint2 v;
    v.x = pack_bf16(a.x * scale, a.y * scale);
    v.y = pack_bf16(a.z * scale, a.w * scale);
    *reinterpret_cast<uint2*>(dq + (row * dq_heads + h) * d + col) = v;
  }
}

template <class K>
void set_smem(K kernel, int bytes) {
  DL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// Grid, block and shared memory of the dK/dV kernel (kDq: the atomic dQ's) with
// DkvWarpgroups warpgroups a CTA, and of the dQ kernel (Q, dO, 2 K and 2 V tiles, and
// (W: delta inside the kernel) O).
template <int D, bool W, bool kDq>
Geometry dkv_geometry(unsigned grid) {
  constexpr int kWG = bwd::DkvWarpgroups<D, W, kDq>::value;
  return {grid, unsigned(kThreads * kWG), bwd::DkvSmem<D, kDq, kWG>::kBytes};
}
template <int D, bool W>
Geometry dq_geometry(unsigned grid) {
  constexpr int kSmemQ = ((W ? 3 : 2) * DqRows<D>::value + 4 * kBK) * D * 2 + kSmemAlign;
  return {grid, unsigned(DqRows<D>::value * 2), kSmemQ};
}

// The backward's steps at head dim D on the mma.sync (W false) or wgmma kernels, the
// modifier-dependent kernels launched by launch_dq and launch_dkv (geometry, arguments): the
// built-ins' instances below, or a user expression's (backward_with).
template <int D, bool W, class LaunchDq, class LaunchDkv>
void run_backward(const Problem& p, const Tile* q_tiles, int n_q_tiles, const Tile* k_tiles,
                  int n_k_tiles, const bf16* out, const bf16* dout, const float* lse,
                  float* delta, bf16* dq, bf16* dk, bf16* dv, const OutRows& out_rows,
                  float* dq_acc, int* dq_counters, LaunchDq&& launch_dq, LaunchDkv&& launch_dkv) {
  const bool atomic_dq = W && dq_acc != nullptr;
  if (!W || atomic_dq) {  // the wgmma dQ kernel computes delta itself
    const int64_t rows = p.t_q * p.heads;
    constexpr int kDeltaThreads = 32 * kDeltaWarps<D>;
    constexpr int64_t kDeltaRows = 16 * kDeltaWarps<D>;
    cuda::launch(delta_kernel<D>, unsigned((rows + kDeltaRows - 1) / kDeltaRows), kDeltaThreads, 0,
                 rows, p.heads, p.t_q, out, dout, delta, atomic_dq ? dq_acc : nullptr);
    DL_CUDA_LAUNCH_CHECK();
  }
  DkvArgs kv;
  kv.p = p;
  kv.tiles = k_tiles;
  kv.dout = dout;
  kv.lse = lse;
  kv.delta = delta;
  kv.dk = dk;
  kv.dv = dv;
  kv.dkv_heads = out_rows.dkv_heads;
  kv.n_tiles = n_k_tiles;
  if constexpr (W) {
    if (atomic_dq) {  // dq_acc zeroed by delta_kernel above
      const int64_t n = p.t_q * p.heads * D;
      kv.dq_acc = dq_acc;
      kv.dq_counters = dq_counters;
      kv.atomic = true;
      if (n_k_tiles > 0) launch_dkv(dkv_geometry<D, W, true>(unsigned(n_k_tiles)), kv);
      cuda::launch(dq_from_acc_kernel, unsigned(std::min<int64_t>((n / 4 + 255) / 256, 8192)), 256,
                   0, static_cast<const float*>(dq_acc), n / 4, p.heads, D, p.scale, dq,
                   out_rows.dq_heads);
      DL_CUDA_LAUNCH_CHECK();
      return;
    }
  }
  if (n_q_tiles > 0) {
    DqArgs a;
    a.p = p;
    a.tiles = q_tiles;
    a.dout = dout;
    a.out = out;
    a.lse = lse;
    a.delta = delta;
    a.dq = dq;
    a.dq_heads = out_rows.dq_heads;
    launch_dq(dq_geometry<D, W>(unsigned(int64_t(n_q_tiles) * p.heads)), a);
  }
  if (n_k_tiles > 0)
    launch_dkv(dkv_geometry<D, W, false>(unsigned(int64_t(n_k_tiles) * p.kv_heads)), kv);
}

// One dK/dV launch of a built-in modifier.
template <int D, class M, bool W, bool kDq>
void launch_dkv(const Geometry& g, const M& mod, const DkvArgs& a) {
  constexpr int kWG = bwd::DkvWarpgroups<D, W, kDq>::value;
  static bool configured = false;
  if (!configured) {
    set_smem(dkv_kernel<D, M, W, kDq, kWG>, g.smem);
    configured = true;
  }
  cuda::launch(dkv_kernel<D, M, W, kDq, kWG>, g.grid, g.block, size_t(g.smem), a.p, mod, a.tiles,
               static_cast<const bf16*>(a.dout), a.lse, a.delta, static_cast<bf16*>(a.dk),
               static_cast<bf16*>(a.dv), a.dkv_heads, a.dq_acc);
  DL_CUDA_LAUNCH_CHECK();
}

// The ModKind of a built-in modifier's kernel type (fast_common.cuh).
template <class M>
constexpr ModKind mod_kind() {
  if constexpr (std::is_same_v<M, ModSoftcap>) return ModKind::softcap;
  else if constexpr (std::is_same_v<M, ModAlibi>) return ModKind::alibi;
  else {
    static_assert(std::is_same_v<M, ModNone>, "a built-in modifier");
    return ModKind::none;
  }
}

template <int D, class M, bool W>
void launch(const Problem& p, const M& mod, const Tile* q_tiles, int n_q_tiles, const Tile* k_tiles,
            int n_k_tiles, const bf16* out, const bf16* dout, const float* lse, float* delta,
            bf16* dq, bf16* dk, bf16* dv, const OutRows& out_rows, float* dq_acc,
            int* dq_counters) {
  auto launch_dq = [&](const Geometry& g, const DqArgs& a) {
    static bool configured = false;
    if (!configured) {
      set_smem(dq_kernel<D, M, W>, g.smem);
      configured = true;
    }
    cuda::launch(dq_kernel<D, M, W>, g.grid, g.block, size_t(g.smem), a.p, mod, a.tiles,
                 static_cast<const bf16*>(a.dout), static_cast<const bf16*>(a.out), a.lse,
                 a.delta, static_cast<bf16*>(a.dq), a.dq_heads);
    DL_CUDA_LAUNCH_CHECK();
  };
  auto launch_kv = [&](const Geometry& g, const DkvArgs& a) {
    const bool sm90_runs = W && sm90::dkv_atomic_runs(a.p, mod_kind<M>());
    DL_CHECK(a.dq_counters == nullptr || sm90_runs, "attention",
             "the ordered dQ takes the sm_90a dK/dV kernel (sm90::dkv_ordered_runs)");
    if constexpr (W) {
      if (a.atomic && sm90_runs)
        return sm90::dkv_atomic<D>(a.p, mod, a.tiles, a.n_tiles, a.dout, a.lse, a.delta, a.dk,
                                a.dv, a.dkv_heads, a.dq_acc, a.dq_counters);
      if (a.atomic) return launch_dkv<D, M, W, true>(g, mod, a);
      if (sm90::dkv_det_runs(a.p, mod_kind<M>()))  // dK, dV only: tiles k_tiles_by_head's
        return sm90::dkv_atomic<D>(a.p, mod, a.tiles, a.n_tiles, a.dout, a.lse, a.delta, a.dk,
                                a.dv, a.dkv_heads, nullptr, nullptr);
    }
    launch_dkv<D, M, W, false>(g, mod, a);
  };
  run_backward<D, W>(p, q_tiles, n_q_tiles, k_tiles, n_k_tiles, out, dout, lse, delta, dq, dk,
                     dv, out_rows, dq_acc, dq_counters, launch_dq, launch_kv);
}

template <int D>
int64_t concurrent_dkv_ctas() {
  constexpr int kWG = bwd::DkvWarpgroups<D, true, true>::value;
  constexpr int kBytes = bwd::DkvSmem<D, true, kWG>::kBytes;
  auto kernel = dkv_kernel<D, ModNone, true, true, kWG>;
  set_smem(kernel, kBytes);
  int dev = 0, sms = 0, per_sm = 0;
  DL_CUDA_CHECK(cudaGetDevice(&dev));
  DL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  DL_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads * kWG, kBytes));
  return int64_t(sms) * per_sm;
}

}  // namespace

int dkv_block_k(const Problem& p, bool atomic, ModKind mod) {
  const int64_t head_dim = p.head_dim;
  if (!atomic) return sm90::dkv_det_runs(p, mod) ? 2 * kBK : kBK;
  if (!use_wgmma()) return kBK;
  if (sm90::dkv_atomic_runs(p, mod)) return 2 * kBK;  // its tiles, at either head dim
  return kBK * (head_dim == 64 ? bwd::DkvWarpgroups<64, true, true>::value
                               : bwd::DkvWarpgroups<128, true, true>::value);
}

int64_t atomic_dkv_concurrent_ctas(const Problem& p, ModKind mod) {
  const int64_t head_dim = p.head_dim;
  if (!atomic_dq()) return 0;
  // DRIFTLESS_ATTN_BWD_BAND (read once): the tail band's tiles instead (a schedule experiment;
  // larger merges more of the runs heaviest first).
  static const int64_t band = [] {
    const std::string v = env_value("DRIFTLESS_ATTN_BWD_BAND");
    return v.empty() ? int64_t(0) : std::max<int64_t>(0, std::stoll(v));
  }();
  if (band > 0) return band;
  // GQA on the sm_90a kernel at head dim 128: every run in the band, the whole list heaviest
  // first. Its tiles carry the group's query heads, so they are few and heavy, and balance
  // outweighs the dQ sums' L2 locality (GQA 4:1, T=4096: 355-358 against 335-340 TFLOP/s).
  // Not measured with GQA at head dim 64, where without GQA the full list was slower.
  const bool sm90_runs = sm90::dkv_atomic_runs(p, mod);
  if (sm90_runs && p.heads != p.kv_heads && head_dim == 128)
    return std::numeric_limits<int64_t>::max();
  if (head_dim == 64 && sm90_runs) return sm90::sm_count();  // one CTA an SM
  if (head_dim == 64) {
    static const int64_t d64 = concurrent_dkv_ctas<64>();
    return d64;
  }
  static const int64_t d128 = concurrent_dkv_ctas<128>();
  return d128;
}

namespace {

// backward()'s steps before its kernels (the gradient rows' widths checked, padded rows
// zeroed); false when no kernel is left to launch. atomic_dq: dq is written whole from dq_acc.
bool backward_prologue(const Problem& p, bool q_padded, bool k_padded, void* dq, void* dk,
                       void* dv, OutRows& rows, bool atomic_dq) {
  if (rows.dq_heads == 0) rows.dq_heads = int(p.heads);
  if (rows.dkv_heads == 0) rows.dkv_heads = int(p.kv_heads);
  DL_CHECK(rows.dq_heads >= p.heads && rows.dkv_heads >= p.kv_heads, "attention",
           "gradient rows of " << rows.dq_heads << " / " << rows.dkv_heads << " heads cannot hold "
                               << p.heads << " / " << p.kv_heads);
  // Padded rows are zeroed first (the kernels write the rows of documents only), row by row
  // where the gradients are rows of a wider buffer.
  auto zero_rows = [](void* x, int64_t rows_n, int64_t heads, int64_t row_heads, int64_t d) {
    const size_t width = size_t(heads * d) * 2, pitch = size_t(row_heads * d) * 2;
    if (rows_n > 0 && width > 0)
      DL_CUDA_CHECK(cudaMemset2DAsync(x, pitch, 0, width, size_t(rows_n)));
  };
  if (q_padded && !atomic_dq) zero_rows(dq, p.t_q, p.heads, rows.dq_heads, p.head_dim);
  if (k_padded) {
    zero_rows(dk, p.t_k, p.kv_heads, rows.dkv_heads, p.head_dim);
    zero_rows(dv, p.t_k, p.kv_heads, rows.dkv_heads, p.head_dim);
  }
  return p.t_q != 0 && p.heads != 0;
}

// f(d, w): the head dim and kernel family as compile-time constants.
template <class F>
void dispatch_dim(const Problem& p, F&& f) {
  auto pick_w = [&](auto d) {
    if (use_wgmma())
      f(d, std::true_type{});
    else
      f(d, std::false_type{});
  };
  if (p.head_dim == 64)
    pick_w(std::integral_constant<int, 64>{});
  else
    pick_w(std::integral_constant<int, 128>{});
}

}  // namespace

void backward(const Problem& problem, const Mod& mod, const Tile* q_tiles, int n_q_tiles,
              const Tile* k_tiles, int n_k_tiles, bool q_padded, bool k_padded, const void* out,
              const void* dout, const float* lse, float* delta, void* dq, void* dk, void* dv,
              OutRows rows, float* dq_acc, int* dq_counters) {
  const Problem p = with_row_strides(problem);
  const bool atomic_dq = dq_acc != nullptr && use_wgmma();
  if (!backward_prologue(p, q_padded, k_padded, dq, dk, dv, rows, atomic_dq)) return;
  dispatch_mod(p, mod, [&](auto m) {
    dispatch_dim(p, [&](auto d, auto w) {
      launch<decltype(d)::value, decltype(m), decltype(w)::value>(
          p, m, q_tiles, n_q_tiles, k_tiles, n_k_tiles, static_cast<const bf16*>(out),
          static_cast<const bf16*>(dout), lse, delta, static_cast<bf16*>(dq),
          static_cast<bf16*>(dk), static_cast<bf16*>(dv), rows, atomic_dq ? dq_acc : nullptr,
          atomic_dq ? dq_counters : nullptr);
    });
  });
}

void backward_with(const Problem& problem, const ModLauncher& launch, const Tile* q_tiles,
                   int n_q_tiles, const Tile* k_tiles, int n_k_tiles, bool q_padded,
                   bool k_padded, const void* out, const void* dout, const float* lse,
                   float* delta, void* dq, void* dk, void* dv, OutRows rows, float* dq_acc) {
  const Problem p = with_row_strides(problem);
  const bool atomic_dq = dq_acc != nullptr && use_wgmma();
  if (!backward_prologue(p, q_padded, k_padded, dq, dk, dv, rows, atomic_dq)) return;
  dispatch_dim(p, [&](auto d, auto w) {
    run_backward<decltype(d)::value, decltype(w)::value>(
        p, q_tiles, n_q_tiles, k_tiles, n_k_tiles, static_cast<const bf16*>(out),
        static_cast<const bf16*>(dout), lse, delta, static_cast<bf16*>(dq),
        static_cast<bf16*>(dk), static_cast<bf16*>(dv), rows, atomic_dq ? dq_acc : nullptr,
        nullptr, launch.dq, launch.dkv);
  });
}

}  // namespace driftless::layers::gpu::fast
