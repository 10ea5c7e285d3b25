// Backward of the fast attention (fast_attention.h), FlashAttention-2 style in one pass over
// the key tiles, deterministic although dQ is added atomically:
//   delta_kernel       delta = rowsum(dO * O) per (q row, head), on tensor cores (see there);
//   bwd_kernel         one CTA per (64-key tile of a document, kv head): S and dP are computed
//                      once per (key tile, query tile), giving dV += P^T dO and dK += dS^T Q in
//                      registers and dQ += dS K added to an f32 accumulator, k tiles in a fixed
//                      order per query tile (a semaphore per query tile and head);
//   dq_convert_kernel  dq = scale * accumulator, in bf16.
// dS = P * (dP - delta) * d value / d score; the softmax scale is applied once at the end.
// dQ = dS K takes dS as a bf16 head plus tail (two products): dS of a row sums to ~0, so
// dQ is a cancelling sum and one bf16 rounding of dS alone put its error at ~2x the CPU's.
#include <algorithm>

#include "engine/core/cuda/check.h"
#include "layers/attention/cuda/fast/fast_common.cuh"

namespace driftless::layers::gpu::fast {
namespace {

constexpr int kBQ = kBwdBlockQ, kBK = kBwdBlockK, kThreads = 128;

// delta[h * T_q + row] = sum_d dO * O, as the diagonal of the tensor-core product dO O^T
// over 16 rows per warp: the same mma, operand positions and k order as dP = dO V^T in the
// dQ kernel, so where O equals the one visible V row (a row that sees a single key) dP and
// delta are bitwise equal and dS is exactly 0, like the CPU path's.
template <int D>
__global__ void delta_kernel(int64_t rows, int64_t heads, int64_t t_q, const bf16* out,
                             const bf16* dout, float* delta) {
  const int64_t r0 = (blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32) * 16;
  if (r0 >= rows) return;
  const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t ra = r0 + g, rb = r0 + g + 8;  // rows of this lane (row * H + h)
  auto ld = [&](const bf16* x, int64_t r, int col) -> uint32_t {
    return r < rows ? *reinterpret_cast<const uint32_t*>(x + r * D + col) : 0u;
  };
  float c0[4] = {0.f, 0.f, 0.f, 0.f}, c1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int kd = 0; kd < D / 16; ++kd) {
    const int col = kd * 16 + 2 * t4;
    const uint32_t a[4] = {ld(dout, ra, col), ld(dout, rb, col), ld(dout, ra, col + 8),
                           ld(dout, rb, col + 8)};
    mma_bf16(c0, a, ld(out, ra, col), ld(out, ra, col + 8));  // O rows r0 .. r0 + 7
    mma_bf16(c1, a, ld(out, rb, col), ld(out, rb, col + 8));  // O rows r0 + 8 .. r0 + 15
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

// Query rows of the document that may see a key of k tile [j0, j0 + nk) (the reference
// kernel's bounds; the element mask re-checks). Empty when *i_end < *i_begin. Both bounds
// never decrease with j0, so the k tiles that visit one aligned q tile are consecutive.
__device__ __forceinline__ void k_tile_rows(const Problem& p, int q_len, int k_len, int j0, int nk,
                                            int* i_begin, int* i_end) {
  const int shift = k_len - q_len;
  int b = 0, e = q_len - 1;
  if (p.causal) b = max(b, j0 - shift);
  if (p.window_right >= 0) b = max(b, int(j0 - p.window_right - shift));
  if (p.window_left >= 0) e = min(e, int(j0 + nk - 1 + p.window_left - shift));
  *i_begin = b;
  *i_end = e;
}

// Last aligned q tile (of kBQ rows) that k tile t visits; -1 when it visits none before 0.
__device__ __forceinline__ int last_q_tile(const Problem& p, int q_len, int k_len, int t) {
  const int j0 = t * kBK;
  int b, e;
  k_tile_rows(p, q_len, k_len, j0, min(kBK, k_len - j0), &b, &e);
  return e < 0 ? -1 : e / kBQ;
}

// How many k tiles before t add to q tile qi: the visiting tiles are consecutive and t is
// one of them, so it is t minus the first tile whose last visited q tile reaches qi.
__device__ __forceinline__ int dq_rank(const Problem& p, int q_len, int k_len, int t, int qi) {
  int lo = 0, hi = t;  // the first is in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (last_q_tile(p, q_len, k_len, mid) >= qi)
      hi = mid;
    else
      lo = mid + 1;
  }
  return t - lo;
}

__device__ __forceinline__ int load_acquire(const int* x) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(x) : "memory");
  return v;
}

__device__ __forceinline__ void add_f32x2(float* dst, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dst), make_float2(x, y));
#else
  atomicAdd(dst, x);
  atomicAdd(dst + 1, y);
#endif
}

// One CTA per (64-key tile of a document, kv head); each of its 4 warps owns 16 keys. For
// every query head of the GQA group and every aligned 64-row query tile that sees the keys:
// S^T and dP^T (16 keys x 64 queries per warp), dV += P^T dO and dK += dS^T Q in registers,
// and dQ += dS K added to the f32 dq_acc. The dQ additions of one (q tile, head) happen one
// k tile at a time in ascending order (sem counts the k tiles done; a tile waits for its
// rank, dq_rank), so every dq element is summed in a fixed order: deterministic although
// the adds are atomic. The waits only go to lower k tiles, which the schedule launches
// first (k_tiles in schedule.cpp), so they cannot deadlock.
template <int D, class M>
__global__ void __launch_bounds__(kThreads)
    bwd_kernel(Problem p, M mod0, const Tile* tiles, const bf16* dout, const float* lse,
               const float* delta, float* dq_acc, int* sem, bf16* dk, bf16* dv) {
  constexpr int KD = D / 16, NQ = kBQ / 8, ND = D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sK = smem_u32(smem);
  const uint32_t sV = sK + kBK * D * 2;
  const uint32_t sQ = sV + kBK * D * 2;       // 2 buffers of (kBQ, D)
  const uint32_t sdO = sQ + 2 * kBQ * D * 2;  // 2 buffers of (kBQ, D)
  const uint32_t sS = sdO + 2 * kBQ * D * 2;  // dS^T (kBK, kBQ) bf16 head, then its tail
  float* sL = reinterpret_cast<float*>(smem + (2 * kBK + 4 * kBQ) * D * 2 + 4 * kBK * kBQ);
  float* sD = sL + 2 * kBQ;  // 2 x kBQ each
  const int64_t H = p.heads, Hkv = p.kv_heads, group = H / Hkv;
  const int kh = int(blockIdx.x % Hkv);
  const Tile tile = tiles[blockIdx.x / Hkv];
  const Doc doc = p.docs[tile.doc];
  const int q_len = int(doc.q_len), k_len = int(doc.k_len), j0 = tile.start;
  const int nk = min(kBK, k_len - j0), t_k = j0 / kBK;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int shift = k_len - q_len;

  int i_begin, i_end;
  k_tile_rows(p, q_len, k_len, j0, nk, &i_begin, &i_end);
  const int qt_first = i_begin / kBQ;
  const int n_qt = i_end >= i_begin ? i_end / kBQ - qt_first + 1 : 0;
  const int n_steps = int(group) * n_qt;
  // q tiles of this document own semaphores [sem_base, sem_base + ceil(q_len / kBQ)) per head.
  const int64_t sem_base = doc.q_offset / kBQ + tile.doc;

  const bf16* kg = static_cast<const bf16*>(p.k) + ((doc.k_offset + j0) * Hkv + kh) * D;
  const bf16* vg = static_cast<const bf16*>(p.v) + ((doc.k_offset + j0) * Hkv + kh) * D;
  float dk_acc[ND][4], dv_acc[ND][4];
#pragma unroll
  for (int n = 0; n < ND; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.f;

  if (n_steps > 0) {
    load_tile<kBK, D, kThreads>(sK, kg, Hkv * D, nk);
    load_tile<kBK, D, kThreads>(sV, vg, Hkv * D, nk);
    // Step s: query head kh * group + s / n_qt, query rows (qt_first + s % n_qt) * kBQ + ...
    auto load_q = [&](int s) {
      const int h = int(kh * group + s / n_qt), q0 = (qt_first + s % n_qt) * kBQ, buf = s & 1;
      const int n = min(kBQ, q_len - q0);
      const int64_t off = ((doc.q_offset + q0) * H + h) * D;
      load_tile<kBQ, D, kThreads>(sQ + buf * kBQ * D * 2, static_cast<const bf16*>(p.q) + off,
                                  H * D, n);
      load_tile<kBQ, D, kThreads>(sdO + buf * kBQ * D * 2, dout + off, H * D, n);
      for (int r = threadIdx.x; r < kBQ; r += kThreads) {
        float L = INFINITY, dl = 0.f;  // P = 0 past the document and for rows seeing nothing
        if (r < n) {
          const int64_t row = doc.q_offset + q0 + r;
          const float l = lse[h * p.t_q + row];
          if (l != -INFINITY) L = l * kLog2e;
          dl = delta[h * p.t_q + row];
        }
        sL[buf * kBQ + r] = L;
        sD[buf * kBQ + r] = dl;
      }
    };
    load_q(0);
    cp_async_commit();
    const int jr[2] = {j0 + warp * 16 + g, j0 + warp * 16 + g + 8};  // this thread's keys
    for (int s = 0; s < n_steps; ++s) {
      if (s + 1 < n_steps) {
        load_q(s + 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      const int buf = s & 1, h = int(kh * group + s / n_qt), qi = qt_first + s % n_qt;
      const int q0 = qi * kBQ;
      M mod = mod0;
      mod.bind(h);
      const uint32_t q_s = sQ + buf * kBQ * D * 2, do_s = sdO + buf * kBQ * D * 2;
      const float* L = sL + buf * kBQ;
      const float* Dl = sD + buf * kBQ;
      float st[NQ][4], dpt[NQ][4];  // (16 keys of the warp, kBQ queries)
#pragma unroll
      for (int n = 0; n < NQ; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.f;
#pragma unroll
      for (int kd = 0; kd < KD; ++kd) {
        uint32_t ak[4], av[4];
        load_a<D>(ak, sK, warp * 16, kd, lane);
        load_a<D>(av, sV, warp * 16, kd, lane);
#pragma unroll
        for (int np = 0; np < NQ / 2; ++np) {
          uint32_t b[4];
          load_b<D>(b, q_s, np * 16, kd, lane);
          mma_bf16(st[2 * np], ak, b[0], b[1]);
          mma_bf16(st[2 * np + 1], ak, b[2], b[3]);
          load_b<D>(b, do_s, np * 16, kd, lane);
          mma_bf16(dpt[2 * np], av, b[0], b[1]);
          mma_bf16(dpt[2 * np + 1], av, b[2], b[3]);
        }
      }
      // Every (query, key) of the step visible: no element mask.
      int lo_a, hi_a, lo_b, hi_b;
      const int q_last = min(q0 + kBQ, q_len) - 1;
      row_keys(p, doc, q0, &lo_a, &hi_a);
      row_keys(p, doc, q_last, &lo_b, &hi_b);
      const bool full =
          q0 + kBQ <= q_len && j0 + kBK <= k_len && lo_b <= j0 && hi_a >= j0 + kBK - 1;
#pragma unroll
      for (int n = 0; n < NQ; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = n * 8 + 2 * t4 + (e & 1), i = q0 + c, j = jr[e >> 1];
          float dx;
          const float x = mod.x_dx(st[n][e], i + shift, j, &dx);
          float pr = exp2f(x - L[c]);
          if (!full) {
            int lo, hi;
            row_keys(p, doc, i, &lo, &hi);
            if (i >= q_len || j < lo || j > hi) pr = 0.f;
          }
          st[n][e] = pr;
          dpt[n][e] = pr * (dpt[n][e] - Dl[c]) * dx;
        }
#pragma unroll
      for (int kk = 0; kk < kBQ / 16; ++kk) {
        uint32_t ap[4], as[4];
        c_to_a(ap, st[2 * kk], st[2 * kk + 1]);
        c_to_a(as, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
        for (int dd = 0; dd < ND / 2; ++dd) {
          uint32_t b[4];
          load_b_trans<D>(b, do_s, kk * 16, dd * 16, lane);
          mma_bf16(dv_acc[2 * dd], ap, b[0], b[1]);
          mma_bf16(dv_acc[2 * dd + 1], ap, b[2], b[3]);
          load_b_trans<D>(b, q_s, kk * 16, dd * 16, lane);
          mma_bf16(dk_acc[2 * dd], as, b[0], b[1]);
          mma_bf16(dk_acc[2 * dd + 1], as, b[2], b[3]);
        }
      }
      // dS^T of the warp's 16 keys to shared memory as a bf16 head and tail (dQ = dS K is a
      // cancelling sum; one bf16 rounding of dS put its error at ~2x the CPU's).
#pragma unroll
      for (int n = 0; n < NQ; ++n)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float x = dpt[n][2 * r], y = dpt[n][2 * r + 1];
          const __nv_bfloat162 hv = __floats2bfloat162_rn(x, y);
          const uint32_t lv = pack_bf16(x - __low2float(hv), y - __high2float(hv));
          const uint32_t a = tile_addr<kBQ>(sS, warp * 16 + g + 8 * r, n) + 4 * t4;
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a),
                       "r"(*reinterpret_cast<const uint32_t*>(&hv)));
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(a + kBK * kBQ * 2), "r"(lv));
        }
      __syncthreads();
      // dQ rows warp * 16 .. + 15 of the q tile, 64 columns at a time: A = dS (16 queries x
      // 16 keys, transposed out of dS^T), B = K.
      const int64_t sem_idx = (sem_base + qi) * H + h;
      if (lane == 0) {
        const int rank = dq_rank(p, q_len, k_len, t_k, qi);
        while (load_acquire(sem + sem_idx) < rank) {
        }
      }
      __syncwarp();
#pragma unroll
      for (int c0 = 0; c0 < D; c0 += 64) {
        float acc[8][4];
#pragma unroll
        for (int n = 0; n < 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          uint32_t a_hi[4], a_lo[4];
          const int key = kk * 16 + (lane & 7) + ((lane >> 4) << 3);
          const int chunk = warp * 2 + ((lane >> 3) & 1);
          ldmatrix_x4_trans(a_hi, tile_addr<kBQ>(sS, key, chunk));
          ldmatrix_x4_trans(a_lo, tile_addr<kBQ>(sS + kBK * kBQ * 2, key, chunk));
#pragma unroll
          for (int dd = 0; dd < 4; ++dd) {
            uint32_t b[4];
            load_b_trans<D>(b, sK, kk * 16, c0 + dd * 16, lane);
            mma_bf16(acc[2 * dd], a_hi, b[0], b[1]);
            mma_bf16(acc[2 * dd + 1], a_hi, b[2], b[3]);
            mma_bf16(acc[2 * dd], a_lo, b[0], b[1]);
            mma_bf16(acc[2 * dd + 1], a_lo, b[2], b[3]);
          }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = q0 + warp * 16 + g + 8 * r;
          if (row >= q_len) continue;
          float* o = dq_acc + ((doc.q_offset + row) * H + h) * D + c0 + 2 * t4;
#pragma unroll
          for (int n = 0; n < 8; ++n) add_f32x2(o + n * 8, acc[n][2 * r], acc[n][2 * r + 1]);
        }
      }
      __syncthreads();  // all adds issued; the buffers and dS are refilled by the next step
      if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(sem + sem_idx, 1);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp * 16 + g + 8 * r;
    if (row >= nk) continue;
    const int64_t off = ((doc.k_offset + j0 + row) * Hkv + kh) * D;
#pragma unroll
    for (int n = 0; n < ND; ++n) {
      *reinterpret_cast<uint32_t*>(dk + off + n * 8 + 2 * t4) =
          pack_bf16(dk_acc[n][2 * r] * p.scale, dk_acc[n][2 * r + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv + off + n * 8 + 2 * t4) =
          pack_bf16(dv_acc[n][2 * r], dv_acc[n][2 * r + 1]);
    }
  }
}

// dq = dq_acc * scale in bf16 (every element: rows no k tile visited are 0 in dq_acc).
__global__ void dq_convert_kernel(int64_t n4, float scale, const float4* acc, uint2* dq) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float4 x = acc[i];
    dq[i] = make_uint2(pack_bf16(x.x * scale, x.y * scale), pack_bf16(x.z * scale, x.w * scale));
  }
}

template <class K>
void set_smem(K kernel, int bytes) {
  DL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int D, class M>
void launch(const Problem& p, const M& mod, const Tile* k_tiles, int n_k_tiles, const bf16* out,
            const bf16* dout, const float* lse, float* delta, float* dq_acc, int* sem, bf16* dq,
            bf16* dk, bf16* dv) {
  constexpr int kSmem = (2 * kBK + 4 * kBQ) * D * 2 + 4 * kBK * kBQ + 4 * kBQ * 4;
  static bool configured = false;
  if (!configured) {
    set_smem(bwd_kernel<D, M>, kSmem);
    configured = true;
  }
  const int64_t rows = p.t_q * p.heads;
  delta_kernel<D><<<unsigned((rows + 127) / 128), 256>>>(rows, p.heads, p.t_q, out, dout, delta);
  DL_CUDA_LAUNCH_CHECK();
  if (n_k_tiles > 0) {
    bwd_kernel<D, M><<<unsigned(int64_t(n_k_tiles) * p.kv_heads), kThreads, kSmem>>>(
        p, mod, k_tiles, dout, lse, delta, dq_acc, sem, dk, dv);
    DL_CUDA_LAUNCH_CHECK();
  }
  const int64_t n4 = rows * D / 4;
  dq_convert_kernel<<<unsigned(std::min<int64_t>((n4 + 255) / 256, 8192)), 256>>>(
      n4, p.scale, reinterpret_cast<const float4*>(dq_acc), reinterpret_cast<uint2*>(dq));
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace

int64_t dq_semaphores(const Problem& p, int64_t n_docs) {
  return (p.t_q / kBQ + n_docs + 1) * p.heads;
}

void backward(const Problem& p, const Mod& mod, const Tile* k_tiles, int n_k_tiles, bool k_padded,
              const void* out, const void* dout, const float* lse, float* delta, float* dq_acc,
              int* sem, int64_t n_sem, void* dq, void* dk, void* dv) {
  const size_t k_bytes = size_t(p.t_k * p.kv_heads * p.head_dim) * 2;
  if (k_padded && k_bytes > 0) {
    DL_CUDA_CHECK(cudaMemsetAsync(dk, 0, k_bytes));
    DL_CUDA_CHECK(cudaMemsetAsync(dv, 0, k_bytes));
  }
  if (p.t_q == 0 || p.heads == 0) return;
  DL_CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, size_t(p.t_q * p.heads * p.head_dim) * 4));
  DL_CUDA_CHECK(cudaMemsetAsync(sem, 0, size_t(n_sem) * 4));
  dispatch_mod(p, mod, [&](auto m) {
    auto go = [&](auto d) {
      launch<decltype(d)::value>(p, m, k_tiles, n_k_tiles, static_cast<const bf16*>(out),
                                 static_cast<const bf16*>(dout), lse, delta, dq_acc, sem,
                                 static_cast<bf16*>(dq), static_cast<bf16*>(dk),
                                 static_cast<bf16*>(dv));
    };
    if (p.head_dim == 64)
      go(std::integral_constant<int, 64>{});
    else
      go(std::integral_constant<int, 128>{});
  });
}

}  // namespace driftless::layers::gpu::fast
