// softmax / log_softmax along any dim and the fused cross-entropy rows, with max-subtracted
// log-sum-exp in fp32 (f64 for f64). Lines along the last dim use one warp (cross-entropy
// one block) per line; lines with a stride use one thread per line, so reads stay
// coalesced. Reductions are fixed-order shuffles: bitwise reproducible.
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"
#include "engine/ops/cuda/softmax.h"

namespace driftless::ops::gpu {
namespace {

// e^v as 2^(v log2 e) by the MUFU approximation, for every f32 softmax, log-softmax and
// cross-entropy here (v <= 0 there): relative error ~2^-22 plus |v| 2^-24 from rounding
// v log2 e (5e-6 at v = -87), and a result below 2^-126 becomes 0. Two instructions where
// expf takes about ten; the cross-entropy rows run two exponentials per logit.
__device__ __forceinline__ float exp_acc(float v) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(v * 1.4426950408889634f));
  return y;
}
__device__ __forceinline__ double exp_acc(double v) {
  return exp(v);
}
__device__ __forceinline__ float log_acc(float v) {
  return logf(v);
}
__device__ __forceinline__ double log_acc(double v) {
  return log(v);
}

// Log-sum-exp of n values at p[0], p[st], ... summed by `lanes` cooperating threads
// (lane `lane` takes every lanes-th value); with lanes == 32 the warp combines.
template <class T, bool Warp>
__device__ acc_t<T> line_lse(const T* p, int64_t n, int64_t st, int lane) {
  using A = acc_t<T>;
  const int step = Warp ? 32 : 1;
  A m = -INFINITY;
  for (int64_t j = lane; j < n; j += step) m = max(m, to_acc(p[j * st]));
  if (Warp) m = warp_max(m);
  A s = 0;
  for (int64_t j = lane; j < n; j += step) s += exp_acc(to_acc(p[j * st]) - m);
  if (Warp) s = warp_sum(s);
  return m + log_acc(s);
}

template <class T, bool Warp>
__device__ void softmax_line(const T* x, T* y, int64_t n, int64_t st, int lane, bool log) {
  const int step = Warp ? 32 : 1;
  const auto lse = line_lse<T, Warp>(x, n, st, lane);
  for (int64_t j = lane; j < n; j += step) {
    const auto v = to_acc(x[j * st]) - lse;
    y[j * st] = from_acc<T>(log ? v : exp_acc(v));
  }
}

template <class T, bool Warp>
__device__ void softmax_backward_line(const T* g, const T* y, T* dx, int64_t n, int64_t st,
                                      int lane, bool log) {
  using A = acc_t<T>;
  const int step = Warp ? 32 : 1;
  A dot = 0;
  for (int64_t j = lane; j < n; j += step)
    dot += log ? to_acc(g[j * st]) : to_acc(g[j * st]) * to_acc(y[j * st]);
  if (Warp) dot = warp_sum(dot);
  for (int64_t j = lane; j < n; j += step) {
    const A gv = to_acc(g[j * st]), yv = to_acc(y[j * st]);
    dx[j * st] = from_acc<T>(log ? gv - exp_acc(yv) * dot : yv * (gv - dot));
  }
}

// inner == 1: a warp per row.
template <class T>
__global__ void softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  cuda::dependent_kernel_begin();
  const int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  if (r >= rows) return;
  softmax_line<T, true>(x + r * n, y + r * n, n, 1, threadIdx.x & 31, log);
}
template <class T>
__global__ void softmax_backward_rows_kernel(const T* g, const T* y, T* dx, int64_t rows, int64_t n,
                                             bool log) {
  cuda::dependent_kernel_begin();
  const int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
  if (r >= rows) return;
  softmax_backward_line<T, true>(g + r * n, y + r * n, dx + r * n, n, 1, threadIdx.x & 31, log);
}

// inner > 1: a thread per (outer, inner) line.
template <class T>
__global__ void softmax_strided_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner,
                                       bool log) {
  cuda::dependent_kernel_begin();
  const int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (l >= outer * inner) return;
  const int64_t base = (l / inner) * n * inner + l % inner;
  softmax_line<T, false>(x + base, y + base, n, inner, 0, log);
}
template <class T>
__global__ void softmax_backward_strided_kernel(const T* g, const T* y, T* dx, int64_t outer,
                                                int64_t n, int64_t inner, bool log) {
  cuda::dependent_kernel_begin();
  const int64_t l = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (l >= outer * inner) return;
  const int64_t base = (l / inner) * n * inner + l % inner;
  softmax_backward_line<T, false>(g + base, y + base, dx + base, n, inner, 0, log);
}

// Threads per cross-entropy row (one block per row). 1024: a GPT-2 row (50257 f32) is 12
// float4 loads per thread, and with the row cached in shared memory (below) one block per
// SM still keeps enough loads in flight.
constexpr int kCeBlock = 1024;

// (max, sum of exp(x - max)) pairs merged in one pass over a row (online softmax).
template <class A>
struct MaxSum {
  A m, s;
};
// Products rounded on their own (no fma contraction), so merge(a, b) and merge(b, a) are the
// same bits: the butterfly of block_merge then leaves every thread of the block with the
// same (max, sum). With a contracted a.s * ea + b.s * eb the two lanes of a pair could differ
// in the last bit, and the fused cross-entropy wrote dlogits from per-thread lse values that
// differed from the stored lse.
__device__ __forceinline__ float mul_rn(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ double mul_rn(double a, double b) {
  return __dmul_rn(a, b);
}
template <class A>
__device__ __forceinline__ MaxSum<A> merge(MaxSum<A> a, MaxSum<A> b) {
  const A m = max(a.m, b.m);
  if (m == A(-INFINITY)) return {m, A(0)};
  return {m, mul_rn(a.s, exp_acc(a.m - m)) + mul_rn(b.s, exp_acc(b.m - m))};
}
// Block-wide merge in a fixed tree (blockDim.x a multiple of 32): deterministic.
template <class A>
__device__ MaxSum<A> block_merge(MaxSum<A> v) {
  __shared__ A sm[32], ss[32];
  for (int o = 16; o > 0; o >>= 1)
    v = merge(
        v, MaxSum<A>{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  if (lane == 0) sm[warp] = v.m, ss[warp] = v.s;
  __syncthreads();
  v = lane < nwarps ? MaxSum<A>{sm[lane], ss[lane]} : MaxSum<A>{A(-INFINITY), A(0)};
  for (int o = 16; o > 0; o >>= 1)
    v = merge(
        v, MaxSum<A>{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)});
  return v;
}

// Max and sum of exp(x - max) over row[0, v) by the block, merged in a fixed order: f32 rows
// that are 16-byte aligned are read as float4 (thread i takes packs i, i + blockDim, ...,
// four loads in flight before any is used, then the v % 4 last elements one by one). A row
// is a few hundred KB and only a few hundred rows (blocks) run at once, so one load in
// flight per thread left the row waiting on memory latency: the loads are unrolled. One
// compiled body (noinline) for every kernel that calls it: the forward-only cross-entropy
// and the fused one with bf16 dlogits are different instantiations, and their lse must be
// the same bits. With `cache` (shared memory, f32 aligned rows), each thread also keeps the
// packs it read there, for dlogits_row to read back instead of the row (each thread its own
// packs: the same index sequence in both functions, so no barrier is needed).
// f(q, j) for the float4 packs j = threadIdx.x, + blockDim.x, ... below n4, in that order,
// four loads in flight before any is used. row_max_sum and dlogits_row both walk a row
// with it, so a thread meets the same packs in both (what the shared-memory cache relies on).
template <class F>
__device__ __forceinline__ void for_each_pack(const float4* r4, int64_t n4, F&& f) {
  const int64_t step = blockDim.x;
  int64_t j = threadIdx.x;
  for (; j + 3 * step < n4; j += 4 * step) {
    float4 q[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) q[u] = r4[j + u * step];
#pragma unroll
    for (int u = 0; u < 4; ++u) f(q[u], j + u * step);
  }
  for (; j < n4; j += step) f(r4[j], j);
}

template <class T>
__device__ __noinline__ MaxSum<acc_t<T>> row_max_sum(const T* row, int64_t v, float4* cache) {
  using A = acc_t<T>;
  MaxSum<A> ms{A(-INFINITY), A(0)};
  auto add = [&ms](A x) {
    if (x > ms.m) {
      ms.s = ms.s * exp_acc(ms.m - x) + A(1);
      ms.m = x;
    } else {
      ms.s += exp_acc(x - ms.m);
    }
  };
  int64_t j0 = 0;
  if constexpr (std::is_same_v<T, float>) {
    if (reinterpret_cast<uintptr_t>(row) % 16 == 0) {
      // Four values at once: one rescale per pack at most (none when the pack is all -inf).
      auto add4 = [&ms](float4 q) {
        const float m4 = fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w));
        if (m4 == -INFINITY) return;
        if (m4 > ms.m) {
          ms.s = ms.s * exp_acc(ms.m - m4);
          ms.m = m4;
        }
        ms.s += (exp_acc(q.x - ms.m) + exp_acc(q.y - ms.m)) +
                (exp_acc(q.z - ms.m) + exp_acc(q.w - ms.m));
      };
      const int64_t n4 = v / 4;
      for_each_pack(reinterpret_cast<const float4*>(row), n4, [&](const float4& q, int64_t j) {
        add4(q);
        if (cache) cache[j] = q;
      });
      j0 = n4 * 4;
    }
  }
  for (int64_t j = j0 + threadIdx.x; j < v; j += blockDim.x) add(to_acc(row[j]));
  return block_merge(ms);
}

// dlogits[j] of a row: w * softmax_j - w * [j == t], w = upstream gradient * mask.
template <class A>
__device__ __forceinline__ A dlogit(A x, A l, A w, bool target) {
  const A p = w * exp_acc(x - l);
  return target ? p - w : p;
}

// Four dlogits stored at once (d is 4-element aligned): one 16- or 8-byte store.
template <class G>
__device__ __forceinline__ void store4(G* d, float a, float b, float c, float e) {
  if constexpr (std::is_same_v<G, float>) {
    *reinterpret_cast<float4*>(d) = make_float4(a, b, c, e);
  } else {
    union {
      G g[4];
      uint2 u;
    } pack{{from_acc<G>(a), from_acc<G>(b), from_acc<G>(c), from_acc<G>(e)}};
    *reinterpret_cast<uint2*>(d) = pack.u;
  }
}

// dlogits of one row by the block (f32 rows that are 16-byte aligned read as float4, four
// loads in flight per thread as in row_max_sum), for the fused and the separate kernels
// alike: one compiled body (noinline), so the compiler cannot contract the arithmetic
// differently in the two kernels and both write the same bits.
template <class T, class G>
__device__ __noinline__ void dlogits_row(const T* row, G* drow, int64_t v, acc_t<T> l, acc_t<T> w,
                                         int64_t t, const float4* cache) {
  int64_t j0 = 0;
  if constexpr (std::is_same_v<T, float>) {
    if (reinterpret_cast<uintptr_t>(row) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(drow) % (4 * sizeof(G)) == 0) {
      const int64_t n4 = v / 4;
      const float4* r4 = cache ? cache : reinterpret_cast<const float4*>(row);
      for_each_pack(r4, n4, [&](const float4& q, int64_t j) {
        const int64_t e = 4 * j;
        store4(drow + e, dlogit(q.x, l, w, e == t), dlogit(q.y, l, w, e + 1 == t),
               dlogit(q.z, l, w, e + 2 == t), dlogit(q.w, l, w, e + 3 == t));
      });
      j0 = n4 * 4;
    }
  }
  for (int64_t j = j0 + threadIdx.x; j < v; j += blockDim.x)
    drow[j] = from_acc<G>(dlogit(to_acc(row[j]), l, w, j == t));
}

// One block per row: lse[r] and row_loss[r] = mask * (lse - logit[target]) (0 where the mask
// is 0, like the CPU body). With dlogits (of type G: the logits' type, or bf16 for a bf16
// GEMM operand), the backward too, from the upstream gradient *go: a second pass over the
// row, which the block has just read (mostly an L2 hit), instead of a kernel reading the
// logits again from memory. Same lse and the same dlogits bits as the separate kernels.
// cache_row: the row is kept in dynamic shared memory between the two passes (f32 rows that
// fit), so the logits are read from memory once: a chunk of rows in flight is larger than
// L2, and the second pass missed it.
template <class T, class G>
__global__ void __launch_bounds__(kCeBlock)
    cross_entropy_forward_kernel(const T* logits, const int64_t* targets, const T* mask,
                                 acc_t<T>* lse, acc_t<T>* row_loss, int64_t v, int64_t ld,
                                 const T* go, G* dlogits, bool cache_row) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  extern __shared__ float4 row_cache[];
  const int64_t r = blockIdx.x;
  const T* row = logits + r * ld;
  float4* cache = cache_row ? row_cache : nullptr;
  const MaxSum<A> ms = row_max_sum(row, v, cache);
  const A l = ms.m + log_acc(ms.s);
  const A wm = mask ? to_acc(mask[r]) : A(1);
  const int64_t t = targets[r];
  if (threadIdx.x == 0) {
    lse[r] = l;
    row_loss[r] = wm != A(0) ? wm * (l - to_acc(row[t])) : A(0);
  }
  if (!dlogits) return;
  dlogits_row(row, dlogits + r * ld, v, l, to_acc(*go) * wm, t, cache);
}

// dlogits of type G: the logits' type, or bf16 straight for a bf16 GEMM operand.
template <class T, class G>
__global__ void __launch_bounds__(kCeBlock)
    cross_entropy_backward_kernel(const T* go_ptr, const T* logits, const int64_t* targets,
                                  const T* mask, const acc_t<T>* lse, G* dlogits, T* dmask,
                                  int64_t v, int64_t ld) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  const int64_t r = blockIdx.x;
  const A go = to_acc(*go_ptr);
  const A w = go * (mask ? to_acc(mask[r]) : A(1));
  const A l = lse[r];
  const int64_t t = targets[r];
  const T* row = logits + r * ld;
  dlogits_row(row, dlogits + r * ld, v, l, w, t, static_cast<const float4*>(nullptr));
  if (dmask && threadIdx.x == 0) dmask[r] = from_acc<T>(go * (l - to_acc(row[t])));
}

// The dynamic shared memory a cross-entropy kernel may cache a row in: the device's opt-in
// maximum per block, granted to the kernel once (per instantiation and device).
template <class K>
size_t row_cache_limit(K* kernel) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> granted;
  int device = 0;
  DL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(reinterpret_cast<const void*>(kernel), device);
  auto it = granted.find(key);
  if (it != granted.end()) return it->second;
  int optin = 0;
  DL_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  // Leave room for the block reduction's static arrays.
  const size_t limit = optin > 1024 ? size_t(optin) - 1024 : 0;
  DL_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(limit)));
  granted[key] = limit;
  return limit;
}

}  // namespace

void launch_softmax_forward(DType dtype, const void* x, void* y, int64_t outer, int64_t n,
                            int64_t inner, bool log) {
  if (outer * n * inner == 0) return;
  dispatch_float("softmax", dtype, [&](auto z) {
    using T = decltype(z);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    if (inner == 1)
      cuda::launch(softmax_rows_kernel<T>, grid_for(outer * 32, 256), 256, 0, px, py, outer, n,
                   log);
    else
      cuda::launch(softmax_strided_kernel<T>, grid_for(outer * inner, 256), 256, 0, px, py, outer,
                   n, inner, log);
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_softmax_backward(DType dtype, const void* g, const void* y, void* dx, int64_t outer,
                             int64_t n, int64_t inner, bool log) {
  if (outer * n * inner == 0) return;
  dispatch_float("softmax", dtype, [&](auto z) {
    using T = decltype(z);
    const T* pg = static_cast<const T*>(g);
    const T* py = static_cast<const T*>(y);
    T* pd = static_cast<T*>(dx);
    if (inner == 1)
      cuda::launch(softmax_backward_rows_kernel<T>, grid_for(outer * 32, 256), 256, 0, pg, py, pd,
                   outer, n, log);
    else
      cuda::launch(softmax_backward_strided_kernel<T>, grid_for(outer * inner, 256), 256, 0, pg, py,
                   pd, outer, n, inner, log);
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_cross_entropy_forward(DType dtype, const void* logits, const int64_t* targets,
                                  const void* mask, void* lse, void* row_loss, int64_t n, int64_t v,
                                  int64_t ld, const void* go, void* dlogits, DType grad_dtype) {
  if (n == 0) return;
  dispatch_float("cross_entropy", dtype, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    auto with = [&](auto g) {
      using G = decltype(g);
      auto kernel = cross_entropy_forward_kernel<T, G>;
      // With dlogits, an aligned f32 row that fits in shared memory is cached there.
      const size_t bytes = size_t(v / 4) * sizeof(float4);
      const bool cache = std::is_same_v<T, float> && dlogits &&
                         reinterpret_cast<uintptr_t>(logits) % 16 == 0 && ld % 4 == 0 &&
                         bytes > 0 && bytes <= row_cache_limit(kernel);
      cuda::launch(kernel, unsigned(n), kCeBlock, cache ? bytes : 0, static_cast<const T*>(logits),
                   targets, static_cast<const T*>(mask), static_cast<A*>(lse),
                   static_cast<A*>(row_loss), v, ld, static_cast<const T*>(go),
                   static_cast<G*>(dlogits), cache);
    };
    if (!dlogits || grad_dtype == dtype) return with(T{});
    DL_CHECK((grad_dtype == DType::bf16 && std::is_same_v<T, float>), "cross_entropy",
             "dlogits as " << dtype_name(grad_dtype) << " from " << dtype_name(dtype)
                           << " logits: only f32 logits give bf16 dlogits");
    if constexpr (std::is_same_v<T, float>) with(bf16_t{});
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_cross_entropy_backward(DType dtype, const void* go, const void* logits,
                                   const int64_t* targets, const void* mask, const void* lse,
                                   void* dlogits, DType grad_dtype, void* dmask, int64_t n,
                                   int64_t v, int64_t ld) {
  if (n == 0) return;
  dispatch_float("cross_entropy", dtype, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    auto go_with = [&](auto g) {
      using G = decltype(g);
      cuda::launch(cross_entropy_backward_kernel<T, G>, unsigned(n), kCeBlock, 0,
                   static_cast<const T*>(go), static_cast<const T*>(logits), targets,
                   static_cast<const T*>(mask), static_cast<const A*>(lse),
                   static_cast<G*>(dlogits), static_cast<T*>(dmask), v, ld);
    };
    if (grad_dtype == dtype) return go_with(T{});
    DL_CHECK((grad_dtype == DType::bf16 && std::is_same_v<T, float>), "cross_entropy",
             "dlogits as " << dtype_name(grad_dtype) << " from " << dtype_name(dtype)
                           << " logits: only f32 logits give bf16 dlogits");
    if constexpr (std::is_same_v<T, float>) go_with(bf16_t{});
  });
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace driftless::ops::gpu
