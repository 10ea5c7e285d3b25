// Forward of the fast attention (fast_attention.h), FlashAttention-2 style: one CTA of 8 warps
// per (128-row query tile of a document, head); each warp owns 16 query rows, keeps its Q
// fragments in registers and runs the online softmax (log2 domain) over 64-key tiles that
// are double-buffered through cp.async. Key tiles no row of the tile sees are never visited;
// the element mask runs only on tiles that cut a row's visible range (causal diagonal,
// window edges, partial tiles). Rows past the document's end are zero-filled on load and
// never stored.
#include <algorithm>

#include "engine/core/cuda/check.h"
#include "layers/attention/cuda/fast/fast_common.cuh"

namespace driftless::layers::gpu::fast {
namespace {

constexpr int kBQ = kFwdBlockQ, kBK = 64, kWarps = kBQ / 16, kThreads = kWarps * 32;

template <int D, class M>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Problem p, M mod, const Tile* tiles, bf16* out, float* lse) {
  constexpr int KD = D / 16, NK = kBK / 8, ND = D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + kBQ * D * 2;      // 2 buffers of (kBK, D)
  const uint32_t sV = sK + 2 * kBK * D * 2;  // 2 buffers of (kBK, D)
  const int64_t H = p.heads, Hkv = p.kv_heads;
  const int h = int(blockIdx.x % H);
  const Tile tile = tiles[blockIdx.x / H];
  const int kh = int(h / (H / Hkv));
  const Doc doc = p.docs[tile.doc];
  const int q_len = int(doc.q_len), k_len = int(doc.k_len), i0 = tile.start;
  const int nq = min(kBQ, q_len - i0);
  mod.bind(h);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;

  int lo_first, hi_first, lo_last, hi_last;  // lo and hi never decrease with the row
  row_keys(p, doc, i0, &lo_first, &hi_first);
  row_keys(p, doc, i0 + nq - 1, &lo_last, &hi_last);
  int lo[2], hi[2], qpos[2];
  for (int r = 0; r < 2; ++r) {
    const int row = warp * 16 + g + 8 * r;
    lo[r] = 1;
    hi[r] = 0;
    if (row < nq) row_keys(p, doc, i0 + row, &lo[r], &hi[r]);
    qpos[r] = i0 + row + k_len - q_len;
  }

  const bf16* qg = static_cast<const bf16*>(p.q) + ((doc.q_offset + i0) * H + h) * D;
  const bf16* kg = static_cast<const bf16*>(p.k) + (doc.k_offset * Hkv + kh) * D;
  const bf16* vg = static_cast<const bf16*>(p.v) + (doc.k_offset * Hkv + kh) * D;
  const int j_begin = lo_first > 0 ? (lo_first / kBK) * kBK : 0;
  const int n_tiles = hi_last >= lo_first ? (hi_last - j_begin) / kBK + 1 : 0;

  float o[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};

  if (n_tiles > 0) {
    load_tile<kBQ, D, kThreads>(sQ, qg, H * D, nq);
    auto load_kv = [&](int t) {
      const int j0 = j_begin + t * kBK, buf = t & 1;
      load_tile<kBK, D, kThreads>(sK + buf * kBK * D * 2, kg + j0 * Hkv * D, Hkv * D, k_len - j0);
      load_tile<kBK, D, kThreads>(sV + buf * kBK * D * 2, vg + j0 * Hkv * D, Hkv * D, k_len - j0);
    };
    load_kv(0);
    cp_async_commit();
    uint32_t qf[KD][4];
    for (int t = 0; t < n_tiles; ++t) {
      if (t + 1 < n_tiles) {
        load_kv(t + 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      if (t == 0) {
#pragma unroll
        for (int kd = 0; kd < KD; ++kd) load_a<D>(qf[kd], sQ, warp * 16, kd, lane);
      }
      const uint32_t k_s = sK + (t & 1) * kBK * D * 2, v_s = sV + (t & 1) * kBK * D * 2;
      const int j0 = j_begin + t * kBK;
      float s[NK][4];
#pragma unroll
      for (int n = 0; n < NK; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
      for (int kd = 0; kd < KD; ++kd) {
#pragma unroll
        for (int np = 0; np < NK / 2; ++np) {
          uint32_t b[4];
          load_b<D>(b, k_s, np * 16, kd, lane);
          mma_bf16(s[2 * np], qf[kd], b[0], b[1]);
          mma_bf16(s[2 * np + 1], qf[kd], b[2], b[3]);
        }
      }
      // Whole tile visible to every row of the CTA: no element mask.
      const bool full = j0 >= lo_last && j0 + kBK - 1 <= hi_first;
#pragma unroll
      for (int n = 0; n < NK; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1, j = j0 + n * 8 + 2 * t4 + (e & 1);
          float x = mod.x(s[n][e], qpos[r], j);
          if (!full && (j < lo[r] || j > hi[r])) x = -INFINITY;
          s[n][e] = x;
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[r];
#pragma unroll
        for (int n = 0; n < NK; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_use = mx == -INFINITY ? 0.f : mx;
        const float corr = exp2f(row_max[r] - m_use);
        row_max[r] = mx;
        float sum = 0.f;
#pragma unroll
        for (int n = 0; n < NK; ++n) {
          s[n][2 * r] = exp2f(s[n][2 * r] - m_use);
          s[n][2 * r + 1] = exp2f(s[n][2 * r + 1] - m_use);
          sum += s[n][2 * r] + s[n][2 * r + 1];
        }
        row_sum[r] = row_sum[r] * corr + sum;
#pragma unroll
        for (int n = 0; n < ND; ++n) {
          o[n][2 * r] *= corr;
          o[n][2 * r + 1] *= corr;
        }
      }
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        uint32_t a[4];
        c_to_a(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
        for (int dp = 0; dp < ND / 2; ++dp) {
          uint32_t b[4];
          load_b_trans<D>(b, v_s, kk * 16, dp * 16, lane);
          mma_bf16(o[2 * dp], a, b[0], b[1]);
          mma_bf16(o[2 * dp + 1], a, b[2], b[3]);
        }
      }
      __syncthreads();  // the buffer is refilled by the next iteration's prefetch
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = warp * 16 + g + 8 * r;
    if (row >= nq) continue;
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int64_t qrow = doc.q_offset + i0 + row;
    bf16* orow = out + (qrow * H + h) * D;
#pragma unroll
    for (int n = 0; n < ND; ++n)
      *reinterpret_cast<uint32_t*>(orow + n * 8 + 2 * t4) =
          pack_bf16(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    if (t4 == 0) lse[h * p.t_q + qrow] = sum > 0.f ? (row_max[r] + log2f(sum)) * kLn2 : -INFINITY;
  }
}

__global__ void fill_kernel(float* x, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = value;
}

template <int D, class M>
void launch(const Problem& p, const M& mod, const Tile* tiles, int n_tiles, void* out, float* lse) {
  constexpr int kSmem = (kBQ + 4 * kBK) * D * 2;
  static bool configured = false;
  if (!configured) {
    DL_CUDA_CHECK(cudaFuncSetAttribute(forward_kernel<D, M>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    configured = true;
  }
  forward_kernel<D, M><<<unsigned(int64_t(n_tiles) * p.heads), kThreads, kSmem>>>(
      p, mod, tiles, static_cast<bf16*>(out), lse);
  DL_CUDA_LAUNCH_CHECK();
}

void fill_f32(float* x, int64_t n, float value) {
  if (n <= 0) return;
  fill_kernel<<<unsigned(std::min<int64_t>((n + 255) / 256, 4096)), 256>>>(x, n, value);
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool supported(const Problem& p, const Mod& mod) {
  return p.bf16 && (p.head_dim == 64 || p.head_dim == 128) &&
         (mod.kind == ModKind::none || mod.kind == ModKind::softcap || mod.kind == ModKind::alibi);
}

void forward(const Problem& p, const Mod& mod, const Tile* tiles, int n_tiles, bool padded,
             void* out, float* lse) {
  if (p.t_q == 0 || p.heads == 0) return;
  if (padded) {
    DL_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(p.t_q * p.heads * p.head_dim) * 2));
    fill_f32(lse, p.t_q * p.heads, -INFINITY);
  }
  if (n_tiles == 0) return;
  dispatch_mod(p, mod, [&](auto m) {
    if (p.head_dim == 64)
      launch<64>(p, m, tiles, n_tiles, out, lse);
    else
      launch<128>(p, m, tiles, n_tiles, out, lse);
  });
}

}  // namespace driftless::layers::gpu::fast
