// The reference CUDA varlen attention (flash_cuda.h): the math of cpu/flash_cpu.h, one
// thread block per output row. Forward: a block per (q row, head) runs the online softmax
// over its visible keys in tiles of kThreads keys, fp32 throughout. Backward without
// atomics: dQ by a block per (q row, head), dK/dV by a block per (k row, kv head) looping
// over the group's query heads and the query rows that see the key, so every output
// element is summed by one thread in a fixed order (bitwise reproducible).
#include <math.h>

#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"
#include "layers/attention/cuda/flash_cuda.h"
#include "layers/attention/mask.h"
#include "layers/attention/score_mod.h"

namespace driftless::layers::gpu {
namespace {

using ops::gpu::bf16_t;
using ops::gpu::block_max;
using ops::gpu::block_sum;
using ops::gpu::from_acc;
using ops::gpu::to_acc;

constexpr int kThreads = 128;  // threads per block = keys (or queries) per tile

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) {
  return a < b ? a : b;
}
__device__ __forceinline__ int64_t imax(int64_t a, int64_t b) {
  return a > b ? a : b;
}

template <class Tin>
__device__ __forceinline__ float dot_sf(const float* a, const Tin* b, int64_t n) {
  float s = 0.f;
  for (int64_t d = 0; d < n; ++d) s += a[d] * to_acc(b[d]);
  return s;
}

// Visible key range of memory row `row` of q; lo > hi when the row sees nothing.
__device__ __forceinline__ void row_range(const Problem& p, int64_t row, int* doc_index, Doc* doc,
                                          int64_t* i, int64_t* lo, int64_t* hi) {
  *lo = 0;
  *hi = -1;
  *doc_index = p.q_doc[row];
  if (*doc_index < 0) return;
  *doc = p.docs[*doc_index];
  *i = row - doc->q_offset;
  visible_keys(*i, doc->q_len, doc->k_len, p.causal, p.window_left, p.window_right, lo, hi);
}

template <class Tin, class M>
__global__ void forward_kernel(Problem p, M mod, Tin* out, float* lse) {
  cuda::dependent_kernel_begin();
  extern __shared__ float smem[];
  const int64_t row = blockIdx.x;
  const int h = int(blockIdx.y);
  const int64_t H = p.heads, Hkv = p.kv_heads, D = p.head_dim, kh = h / (H / Hkv);
  float* q_s = smem;         // (D)
  float* acc = smem + D;     // (D)
  float* ps = smem + 2 * D;  // (kThreads)
  const Tin* k = static_cast<const Tin*>(p.k);
  const Tin* v = static_cast<const Tin*>(p.v);
  Tin* o = out + (row * H + h) * D;
  int b = -1;
  Doc doc{};
  int64_t i = 0, lo, hi;
  row_range(p, row, &b, &doc, &i, &lo, &hi);
  if (lo > hi) {  // padding, or a row that sees no key: out 0, LSE -inf
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) o[d] = from_acc<Tin>(0.f);
    if (threadIdx.x == 0) lse[h * p.t_q + row] = -INFINITY;
    return;
  }
  const Tin* q = static_cast<const Tin*>(p.q) + (row * H + h) * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    q_s[d] = to_acc(q[d]);
    acc[d] = 0.f;
  }
  __syncthreads();
  const int qpos = int(query_position(i, doc.q_len, doc.k_len));
  float m = -INFINITY, l = 0.f;
  for (int64_t j0 = lo; j0 <= hi; j0 += kThreads) {
    const int64_t j = j0 + threadIdx.x;
    float s = -INFINITY;
    if (j <= hi) {
      const float dot = dot_sf(q_s, k + ((doc.k_offset + j) * Hkv + kh) * D, D);
      s = mod.value(dot * p.scale, b, h, qpos, int(j));
    }
    const float m_new = fmaxf(m, block_max(s));  // block-uniform
    if (m_new == -INFINITY) continue;
    const float corr = expf(m - m_new);  // 0 on the first tile
    const float pj = j <= hi ? expf(s - m_new) : 0.f;
    ps[threadIdx.x] = pj;
    l = l * corr + block_sum(pj);  // block_sum synchronises, so ps is visible below
    const int n = int(imin(kThreads, hi - j0 + 1));
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float a = acc[d] * corr;
      for (int t = 0; t < n; ++t)
        a += ps[t] * to_acc(v[((doc.k_offset + j0 + t) * Hkv + kh) * D + d]);
      acc[d] = a;
    }
    m = m_new;
    __syncthreads();  // ps is rewritten by the next tile
  }
  const bool seen = l > 0.f;
  const float inv = seen ? 1.f / l : 0.f;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
    o[d] = from_acc<Tin>(seen ? acc[d] * inv : 0.f);
  if (threadIdx.x == 0) lse[h * p.t_q + row] = seen ? m + logf(l) : -INFINITY;
}

// delta = rowsum(dO * O) per (q row, head), summed in the CPU kernel's order.
template <class Tin>
__global__ void delta_kernel(int64_t n, int64_t D, const Tin* out, const Tin* dout, float* delta) {
  cuda::dependent_kernel_begin();
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= n) return;
  float s = 0.f;
  for (int64_t d = 0; d < D; ++d) s += to_acc(dout[r * D + d]) * to_acc(out[r * D + d]);
  delta[r] = s;
}

template <class Tin, class M>
__global__ void dq_kernel(Problem p, M mod, const Tin* dout, const float* lse, const float* delta,
                          Tin* dq) {
  cuda::dependent_kernel_begin();
  extern __shared__ float smem[];
  const int64_t row = blockIdx.x;
  const int h = int(blockIdx.y);
  const int64_t H = p.heads, Hkv = p.kv_heads, D = p.head_dim, kh = h / (H / Hkv);
  float* q_s = smem;          // (D)
  float* do_s = smem + D;     // (D)
  float* acc = smem + 2 * D;  // (D)
  float* gs = smem + 3 * D;   // (kThreads)
  const Tin* k = static_cast<const Tin*>(p.k);
  const Tin* v = static_cast<const Tin*>(p.v);
  Tin* g_out = dq + (row * H + h) * D;
  int b = -1;
  Doc doc{};
  int64_t i = 0, lo, hi;
  row_range(p, row, &b, &doc, &i, &lo, &hi);
  const float L = lo <= hi ? lse[h * p.t_q + row] : -INFINITY;
  if (L == -INFINITY) {  // padding or a row that saw nothing: no gradient
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) g_out[d] = from_acc<Tin>(0.f);
    return;
  }
  const Tin* q = static_cast<const Tin*>(p.q) + (row * H + h) * D;
  const Tin* dor = dout + (row * H + h) * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    q_s[d] = to_acc(q[d]);
    do_s[d] = to_acc(dor[d]);
    acc[d] = 0.f;
  }
  __syncthreads();
  const float dl = delta[row * H + h];
  const int qpos = int(query_position(i, doc.q_len, doc.k_len));
  for (int64_t j0 = lo; j0 <= hi; j0 += kThreads) {
    const int64_t j = j0 + threadIdx.x;
    float g = 0.f;
    if (j <= hi) {
      const int64_t ko = ((doc.k_offset + j) * Hkv + kh) * D;
      const float s0 = dot_sf(q_s, k + ko, D) * p.scale;
      const float pj = expf(mod.value(s0, b, h, qpos, int(j)) - L);
      const float ds = pj * (dot_sf(do_s, v + ko, D) - dl);
      g = ds * mod.derivative(s0, b, h, qpos, int(j)) * p.scale;
    }
    gs[threadIdx.x] = g;
    __syncthreads();
    const int n = int(imin(kThreads, hi - j0 + 1));
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float a = acc[d];
      for (int t = 0; t < n; ++t)
        a += gs[t] * to_acc(k[((doc.k_offset + j0 + t) * Hkv + kh) * D + d]);
      acc[d] = a;
    }
    __syncthreads();
  }
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) g_out[d] = from_acc<Tin>(acc[d]);
}

template <class Tin, class M>
__global__ void dkv_kernel(Problem p, M mod, const Tin* dout, const float* lse, const float* delta,
                           Tin* dk, Tin* dv) {
  cuda::dependent_kernel_begin();
  extern __shared__ float smem[];
  const int64_t row = blockIdx.x;  // key row
  const int kh = int(blockIdx.y);
  const int64_t H = p.heads, Hkv = p.kv_heads, D = p.head_dim, group = H / Hkv;
  float* k_s = smem;             // (D)
  float* v_s = smem + D;         // (D)
  float* dk_acc = smem + 2 * D;  // (D)
  float* dv_acc = smem + 3 * D;  // (D)
  float* gs = smem + 4 * D;      // (kThreads)
  float* ps = gs + kThreads;     // (kThreads)
  const Tin* q = static_cast<const Tin*>(p.q);
  const int64_t ko = (row * Hkv + kh) * D;
  const int b = p.k_doc[row];
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    k_s[d] = to_acc(static_cast<const Tin*>(p.k)[ko + d]);
    v_s[d] = to_acc(static_cast<const Tin*>(p.v)[ko + d]);
    dk_acc[d] = 0.f;
    dv_acc[d] = 0.f;
  }
  __syncthreads();
  if (b >= 0) {
    const Doc doc = p.docs[b];
    const int64_t j = row - doc.k_offset, shift = doc.k_len - doc.q_len;
    // Query rows that can see key j (mask.h, solved for i); each is re-checked below.
    int64_t i_begin = 0, i_end = doc.q_len - 1;
    if (p.causal) i_begin = imax(i_begin, j - shift);
    if (p.window_right >= 0) i_begin = imax(i_begin, j - p.window_right - shift);
    if (p.window_left >= 0) i_end = imin(i_end, j + p.window_left - shift);
    for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
      for (int64_t i0 = i_begin; i0 <= i_end; i0 += kThreads) {
        const int64_t i = i0 + threadIdx.x;
        float g = 0.f, pj = 0.f;
        if (i <= i_end) {
          int64_t lo, hi;
          visible_keys(i, doc.q_len, doc.k_len, p.causal, p.window_left, p.window_right, &lo, &hi);
          const int64_t row_q = doc.q_offset + i;
          const float L = lse[h * p.t_q + row_q];
          if (lo <= j && j <= hi && L != -INFINITY) {
            const int64_t qo = (row_q * H + h) * D;
            const int qpos = int(query_position(i, doc.q_len, doc.k_len));
            float qk = 0.f, dov = 0.f;
            for (int64_t d = 0; d < D; ++d) qk += to_acc(q[qo + d]) * k_s[d];
            for (int64_t d = 0; d < D; ++d) dov += to_acc(dout[qo + d]) * v_s[d];
            const float s0 = qk * p.scale;
            pj = expf(mod.value(s0, b, int(h), qpos, int(j)) - L);
            const float ds = pj * (dov - delta[row_q * H + h]);
            g = ds * mod.derivative(s0, b, int(h), qpos, int(j)) * p.scale;
          }
        }
        gs[threadIdx.x] = g;
        ps[threadIdx.x] = pj;
        __syncthreads();
        const int n = int(imin(kThreads, i_end - i0 + 1));
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
          float a = dk_acc[d], c = dv_acc[d];
          for (int t = 0; t < n; ++t) {
            const int64_t qo = ((doc.q_offset + i0 + t) * H + h) * D + d;
            a += gs[t] * to_acc(q[qo]);
            c += ps[t] * to_acc(dout[qo]);
          }
          dk_acc[d] = a;
          dv_acc[d] = c;
        }
        __syncthreads();
      }
    }
  }
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    dk[ko + d] = from_acc<Tin>(dk_acc[d]);
    dv[ko + d] = from_acc<Tin>(dv_acc[d]);
  }
}

// Calls f(Tin{}, functor) for the problem's dtype and the modifier.
template <class F>
void dispatch(const Problem& p, const Mod& mod, F&& f) {
  auto with_mod = [&](auto tag) {
    switch (mod.kind) {
      case ModKind::none:
        return f(tag, score_mod::None<float>{});
      case ModKind::softcap:
        return f(tag, score_mod::Softcap<float>{mod.softcap});
      case ModKind::alibi:
        return f(tag, score_mod::Alibi<float>{mod.alibi_slopes});
    }
    DL_FAIL("attention", "unknown cuda score modifier kind " << int(mod.kind));
  };
  if (p.bf16)
    with_mod(bf16_t{});
  else
    with_mod(float{});
}

}  // namespace

void launch_forward(const Problem& p, const Mod& mod, void* out, float* lse) {
  if (p.t_q == 0 || p.heads == 0) return;
  const size_t shared = size_t(2 * p.head_dim + kThreads) * sizeof(float);
  dispatch(p, mod, [&](auto tag, auto functor) {
    using Tin = decltype(tag);
    cuda::launch(forward_kernel<Tin, decltype(functor)>, dim3(unsigned(p.t_q), unsigned(p.heads)),
                 kThreads, shared, p, functor, static_cast<Tin*>(out), lse);
    DL_CUDA_LAUNCH_CHECK();
  });
}

void launch_backward(const Problem& p, const Mod& mod, const void* out, const void* dout,
                     const float* lse, float* delta, void* dq, void* dk, void* dv) {
  dispatch(p, mod, [&](auto tag, auto functor) {
    using Tin = decltype(tag);
    const Tin* o = static_cast<const Tin*>(out);
    const Tin* dO = static_cast<const Tin*>(dout);
    const int64_t rows = p.t_q * p.heads;
    if (rows > 0) {
      cuda::launch(delta_kernel<Tin>, ops::gpu::grid_for(rows, 256), 256, 0, rows, p.head_dim, o,
                   dO, delta);
      DL_CUDA_LAUNCH_CHECK();
      const size_t shared = size_t(3 * p.head_dim + kThreads) * sizeof(float);
      cuda::launch(dq_kernel<Tin, decltype(functor)>, dim3(unsigned(p.t_q), unsigned(p.heads)),
                   kThreads, shared, p, functor, dO, lse, delta, static_cast<Tin*>(dq));
      DL_CUDA_LAUNCH_CHECK();
    }
    if (p.t_k > 0 && p.kv_heads > 0) {
      const size_t shared = size_t(4 * p.head_dim + 2 * kThreads) * sizeof(float);
      cuda::launch(dkv_kernel<Tin, decltype(functor)>, dim3(unsigned(p.t_k), unsigned(p.kv_heads)),
                   kThreads, shared, p, functor, dO, lse, delta, static_cast<Tin*>(dk),
                   static_cast<Tin*>(dv));
      DL_CUDA_LAUNCH_CHECK();
    }
  });
}

}  // namespace driftless::layers::gpu
