// Layer norm over the last dim (llm.c style): one warp per row with fp32 (f64 for f64)
// statistics, the row in registers as 16-byte packs where its width allows; the backward makes dx
// per row and reduces dweight/dbias over fixed chunks of rows, then over the chunks in order (two
// passes, no atomics: bitwise reproducible).
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"
#include "engine/ops/cuda/norm.h"

namespace driftless::ops::gpu {
namespace {

constexpr int kRowsPerBlock = 8;    // warps per block, one row each
constexpr int64_t kChunkRows = 32;  // rows per partial of dweight/dbias

__device__ __forceinline__ float rsqrt_acc(float v) {
  return 1.0f / sqrtf(v);
}
__device__ __forceinline__ double rsqrt_acc(double v) {
  return 1.0 / sqrt(v);
}

// A product rounded on its own, so nvcc cannot fuse it into a later subtraction: dxhat is
// then the same number in the row sums and in dx, and dx is exactly 0 when C == 1.
__device__ __forceinline__ float mul_rn(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ double mul_rn(double a, double b) {
  return __dmul_rn(a, b);
}

template <class T>
__global__ void layer_norm_forward_kernel(const T* x, const T* w, const T* b, T* out,
                                          acc_t<T>* mean, acc_t<T>* rstd, int64_t rows, int64_t c,
                                          double eps) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (r >= rows) return;
  const T* xr = x + r * c;
  A s = 0;
  for (int64_t i = lane; i < c; i += 32) s += to_acc(xr[i]);
  const A m = warp_sum(s) / A(c);
  A v = 0;
  for (int64_t i = lane; i < c; i += 32) {
    const A d = to_acc(xr[i]) - m;
    v += d * d;
  }
  const A rs = rsqrt_acc(warp_sum(v) / A(c) + A(eps));
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
  T* yr = out + r * c;
  for (int64_t i = lane; i < c; i += 32) {
    A y = (to_acc(xr[i]) - m) * rs;
    if (w) y *= to_acc(w[i]);
    if (b) y += to_acc(b[i]);
    yr[i] = from_acc<T>(y);
  }
}

// add (or null): a gradient of x from elsewhere (the residual stream's), summed into dx before
// the one rounding.
template <class T>
__global__ void layer_norm_dx_kernel(const T* g, const T* x, const T* w, const acc_t<T>* mean,
                                     const acc_t<T>* rstd, const T* add, T* dx, int64_t rows,
                                     int64_t c) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (r >= rows) return;
  const T* xr = x + r * c;
  const T* gr = g + r * c;
  const A m = mean[r], s = rstd[r];
  A sum_d = 0, sum_dx = 0;  // sums of dxhat and dxhat * xhat
  for (int64_t i = lane; i < c; i += 32) {
    const A xhat = (to_acc(xr[i]) - m) * s;
    const A d = w ? mul_rn(to_acc(gr[i]), to_acc(w[i])) : to_acc(gr[i]);
    sum_d += d;
    sum_dx += d * xhat;
  }
  const A mean_d = warp_sum(sum_d) / A(c), mean_dx = warp_sum(sum_dx) / A(c);
  T* dr = dx + r * c;
  for (int64_t i = lane; i < c; i += 32) {
    const A xhat = (to_acc(xr[i]) - m) * s;
    const A d = w ? mul_rn(to_acc(gr[i]), to_acc(w[i])) : to_acc(gr[i]);
    A y = s * (d - mean_d - xhat * mean_dx);
    if (add) y += to_acc(add[r * c + i]);
    dr[i] = from_acc<T>(y);
  }
}

// Pass 1: partial[chunk][col] over the chunk's rows, one thread per (chunk, column).
template <class T>
__global__ void layer_norm_dwb_partial_kernel(const T* g, const T* x, const acc_t<T>* mean,
                                              const acc_t<T>* rstd, acc_t<T>* part_w,
                                              acc_t<T>* part_b, int64_t rows, int64_t c) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (col >= c) return;
  const int64_t r0 = chunk * kChunkRows, r1 = min(rows, r0 + kChunkRows);
  A aw = 0, ab = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const A gv = to_acc(g[r * c + col]);
    aw += gv * ((to_acc(x[r * c + col]) - mean[r]) * rstd[r]);
    ab += gv;
  }
  part_w[chunk * c + col] = aw;
  part_b[chunk * c + col] = ab;
}

// Pass 2: sum the chunks of each column (col_sums: a fixed order).
// With `accumulate` (T's accumulator is f32) dw and db are f32 gradient storage that the sums
// are added to: a parameter's slab gradient, without a rounding to T and a separate add.
template <class T>
__global__ void layer_norm_dwb_final_kernel(const acc_t<T>* part_w, const acc_t<T>* part_b,
                                            void* dw, void* db, int64_t chunks, int64_t c,
                                            bool accumulate) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  auto put = [&](void* out, int64_t col, A v) {
    if (accumulate)
      static_cast<float*>(out)[col] += float(v);
    else
      static_cast<T*>(out)[col] = from_acc<T>(v);
  };
  // blockIdx.y: 0 sums the weight's column partials, 1 the bias's (twice the blocks).
  if (blockIdx.y == 0 && dw)
    col_sums(part_w, chunks, c, [&](int64_t col, A v) { put(dw, col, v); });
  if (blockIdx.y == 1 && db)
    col_sums(part_b, chunks, c, [&](int64_t col, A v) { put(db, col, v); });
}

// Rows of c = NP * 32 * V elements (V = 16 / sizeof(T)), 16-byte aligned (GPT widths: 768 =
// 3 * 256 bf16): the same computations, with the row held in registers and moved as 16-byte
// packs (common.cuh's Pack), lane l holding packs l, l + 32, ...: x and g are read once
// instead of two or three times one element at a time.
constexpr int kMaxPacks = 8;  // packs per lane: rows of up to 2048 bf16 / 1024 f32
// Packs per lane up to which the dx kernel also makes the dweight / dbias partials (its sums
// in shared memory, kFusedWarps x 2 x C floats; GPT-2's 768 and 1024 bf16 are 3 and 4). Its
// partials sum a chunk's rows warp by warp, the separate partial kernel row by row: the two
// give different bits, and which runs depends on the width and on 16-byte alignment of the
// row pointers (always met by this project's allocations for widths of whole packs).
constexpr int kMaxFusedPacks = 4;
constexpr int kFusedWarps = 4;  // warps per block of the fused kernel (its sums: 32 KiB at 1024)

// One row's x, g and add (or nothing) as loaded: 16-byte packs, converted where used.
template <int NP>
struct RowPacks {
  uint4 x[NP], g[NP], a[NP];
};
template <class T, int NP>
__device__ __forceinline__ void load_row(RowPacks<NP>& rp, const T* x, const T* g, const T* add,
                                         int64_t r, int lane) {
  constexpr int C = NP * 32 * Pack<T>::V;
#pragma unroll
  for (int p = 0; p < NP; ++p) {
    const int64_t at = r * C + (p * 32 + lane) * Pack<T>::V;
    rp.x[p] = *reinterpret_cast<const uint4*>(x + at);
    rp.g[p] = *reinterpret_cast<const uint4*>(g + at);
    if (add) rp.a[p] = *reinterpret_cast<const uint4*>(add + at);
  }
}

template <class T, int NP>
__global__ void layer_norm_forward_vec_kernel(const T* x, const T* w, const T* b, T* out,
                                              float* mean, float* rstd, int64_t rows, float eps) {
  cuda::dependent_kernel_begin();
  constexpr int V = Pack<T>::V, C = NP * 32 * V;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (r >= rows) return;
  float v[NP][V];
  float s = 0;
#pragma unroll
  for (int p = 0; p < NP; ++p) {
    Pack<T>::load(x + r * C + (p * 32 + lane) * V, v[p]);
#pragma unroll
    for (int j = 0; j < V; ++j) s += v[p][j];
  }
  const float m = warp_sum(s) / float(C);
  float q = 0;
#pragma unroll
  for (int p = 0; p < NP; ++p)
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float d = v[p][j] - m;
      q += d * d;
    }
  const float rs = rsqrt_acc(warp_sum(q) / float(C) + eps);
  if (lane == 0) {
    mean[r] = m;
    rstd[r] = rs;
  }
#pragma unroll
  for (int p = 0; p < NP; ++p) {
    const int col = (p * 32 + lane) * V;
    float wv[V], bv[V], y[V];
    if (w) Pack<T>::load(w + col, wv);
    if (b) Pack<T>::load(b + col, bv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      y[j] = (v[p][j] - m) * rs;
      if (w) y[j] *= wv[j];
      if (b) y[j] += bv[j];
    }
    Pack<T>::store(out + r * C + col, y);
  }
}

// dx of a row in registers (lane l: packs l, l + 32, ...), plus `add` (or null) before the
// one rounding. With part_w / part_b (Fuse: blocks of kFusedWarps warps, one per chunk of
// kChunkRows rows), the warps also sum g * xhat and g over the chunk, warp w taking rows w,
// w + kFusedWarps, ... in order into its own shared-memory sums, then the warps in order:
// the dweight / dbias pass 1 without a second read of x and g.
template <class T, int NP, bool Fuse>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    layer_norm_dx_vec_kernel(const T* g, const T* x, const T* w, const float* mean,
                             const float* rstd, const T* add, T* dx, float* part_w, float* part_b,
                             int64_t rows) {
  cuda::dependent_kernel_begin();
  constexpr int V = Pack<T>::V, C = NP * 32 * V;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Fuse: [warp][sum (w, b)][p][j][lane], lane fastest (conflict-free).
  __shared__ float sums[Fuse ? kFusedWarps * 2 * C : 1];
  float* mine = sums + (Fuse ? warp * 2 * C : 0);
  auto at = [&](int which, int p, int j) -> float& {
    return mine[which * C + (p * V + j) * 32 + lane];
  };
  if constexpr (Fuse)
#pragma unroll
    for (int p = 0; p < NP; ++p)
#pragma unroll
      for (int j = 0; j < V; ++j) at(0, p, j) = at(1, p, j) = 0.f;
  // One row from its loaded packs (add: loaded there when Fuse, else here).
  auto row = [&](int64_t r, const RowPacks<NP>& cur) {
    const float m = mean[r], s = rstd[r];
    float xhat[NP][V], d[NP][V];
    float sum_d = 0, sum_dx = 0;
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      const int col = (p * 32 + lane) * V;
      float wv[V];
      Pack<T>::unpack(cur.x[p], xhat[p]);
      Pack<T>::unpack(cur.g[p], d[p]);
      if (w) Pack<T>::load(w + col, wv);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        xhat[p][j] = (xhat[p][j] - m) * s;
        if constexpr (Fuse) {
          at(0, p, j) += d[p][j] * xhat[p][j];
          at(1, p, j) += d[p][j];
        }
        if (w) d[p][j] = mul_rn(d[p][j], wv[j]);
        sum_d += d[p][j];
        sum_dx += d[p][j] * xhat[p][j];
      }
    }
    const float mean_d = warp_sum(sum_d) / float(C), mean_dx = warp_sum(sum_dx) / float(C);
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      const int col = (p * 32 + lane) * V;
      float y[V], av[V];
      if (add) {
        if constexpr (Fuse)
          Pack<T>::unpack(cur.a[p], av);
        else
          Pack<T>::load(add + r * C + col, av);
      }
#pragma unroll
      for (int j = 0; j < V; ++j) {
        y[j] = s * (d[p][j] - mean_d - xhat[p][j] * mean_dx);
        if (add) y[j] += av[j];
      }
      Pack<T>::store(dx + r * C + col, y);
    }
  };
  if constexpr (Fuse) {
    // Warp w walks rows w, w + kFusedWarps, ... of the chunk; the next row's loads go out
    // before this row's arithmetic.
    const int64_t first = blockIdx.x * kChunkRows + warp;
    const int64_t last = min(rows, (blockIdx.x + 1) * kChunkRows);
    RowPacks<NP> cur, next;
    if (first < last) load_row<T, NP>(cur, x, g, add, first, lane);
    for (int64_t r = first; r < last; r += kFusedWarps) {
      if (r + kFusedWarps < last) load_row<T, NP>(next, x, g, add, r + kFusedWarps, lane);
      row(r, cur);
      cur = next;
    }
  } else {
    const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + warp;
    if (r < rows) {
      RowPacks<NP> cur;
      load_row<T, NP>(cur, x, g, nullptr, r, lane);
      row(r, cur);
    }
  }
  if constexpr (Fuse) {
    __syncthreads();
    for (int i = threadIdx.x; i < C; i += blockDim.x) {  // i = (p * V + j) * 32 + lane
      const int p = i / (V * 32), j = (i / 32) % V, l = i % 32;
      const int64_t col = (p * 32 + l) * V + j;
      float tw = 0, tb = 0;
      for (int k = 0; k < kFusedWarps; ++k) {
        tw += sums[k * 2 * C + i];
        tb += sums[k * 2 * C + C + i];
      }
      part_w[blockIdx.x * int64_t(C) + col] = tw;
      part_b[blockIdx.x * int64_t(C) + col] = tb;
    }
  }
}


// Packs per lane when the vectorized kernels take rows of c elements of T, else 0.
template <class T>
int packs_for(int64_t c) {
  if constexpr (sizeof(T) > 4) {
    return 0;  // f64 keeps the scalar kernels
  } else {
    constexpr int64_t per = 32 * Pack<T>::V;
    return c % per == 0 && c / per <= kMaxPacks ? int(c / per) : 0;
  }
}

// Calls f(std::integral_constant<int, NP>) for np in 1..kMaxPacks.
template <class F>
void with_packs(int np, const F& f) {
  // clang-format off
  switch (np) {
    case 1: return f(std::integral_constant<int, 1>());
    case 2: return f(std::integral_constant<int, 2>());
    case 3: return f(std::integral_constant<int, 3>());
    case 4: return f(std::integral_constant<int, 4>());
    case 5: return f(std::integral_constant<int, 5>());
    case 6: return f(std::integral_constant<int, 6>());
    case 7: return f(std::integral_constant<int, 7>());
    default: return f(std::integral_constant<int, 8>());
  }
  // clang-format on
}

}  // namespace

void launch_layer_norm_forward(DType dtype, const void* x, const void* w, const void* b, void* out,
                               void* mean, void* rstd, int64_t rows, int64_t c, double eps) {
  if (rows == 0) return;
  dispatch_float("layer_norm", dtype, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const unsigned blocks = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    if constexpr (std::is_same_v<A, float>) {
      const int np = packs_for<T>(c);
      if (np > 0 && aligned16({x, w, b, out})) {
        with_packs(np, [&](auto n) {
          cuda::launch(layer_norm_forward_vec_kernel<T, decltype(n)::value>, blocks,
                       32 * kRowsPerBlock, 0, static_cast<const T*>(x), static_cast<const T*>(w),
                       static_cast<const T*>(b), static_cast<T*>(out), static_cast<float*>(mean),
                       static_cast<float*>(rstd), rows, float(eps));
        });
        return;
      }
    }
    cuda::launch(layer_norm_forward_kernel<T>, blocks, 32 * kRowsPerBlock, 0,
                 static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b),
                 static_cast<T*>(out), static_cast<A*>(mean), static_cast<A*>(rstd), rows, c, eps);
  });
  DL_CUDA_LAUNCH_CHECK();
}

int64_t layer_norm_chunks(int64_t rows) {
  return (rows + kChunkRows - 1) / kChunkRows;
}

void launch_layer_norm_backward(DType dtype, const void* g, const void* x, const void* w,
                                const void* mean, const void* rstd, const void* add, void* dx,
                                void* dw, void* db, void* scratch, int64_t rows, int64_t c,
                                bool accumulate) {
  if (rows == 0) return;
  dispatch_float("layer_norm", dtype, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const T* pg = static_cast<const T*>(g);
    const T* px = static_cast<const T*>(x);
    const T* pa = static_cast<const T*>(add);
    const A* pm = static_cast<const A*>(mean);
    const A* pr = static_cast<const A*>(rstd);
    const unsigned blocks = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    const int64_t chunks = layer_norm_chunks(rows);
    A* part_w = static_cast<A*>(scratch);
    A* part_b = part_w ? part_w + chunks * c : nullptr;
    const bool want = dw || db;
    bool vec = false, fused = false;
    if constexpr (std::is_same_v<A, float>) {
      const int np = packs_for<T>(c);
      vec = np > 0 && aligned16({g, x, w, add, dx});
      fused = vec && want && np <= kMaxFusedPacks;
      if (vec)
        with_packs(np, [&](auto n) {
          constexpr int NP = decltype(n)::value;
          if constexpr (NP <= kMaxFusedPacks) {
            if (fused) {
              cuda::launch(layer_norm_dx_vec_kernel<T, NP, true>, unsigned(chunks),
                           32 * kFusedWarps, 0, pg, px, static_cast<const T*>(w), pm, pr, pa,
                           static_cast<T*>(dx), part_w, part_b, rows);
              return;
            }
          }
          cuda::launch(layer_norm_dx_vec_kernel<T, NP, false>, blocks, 32 * kRowsPerBlock, 0, pg,
                       px, static_cast<const T*>(w), pm, pr, pa, static_cast<T*>(dx), nullptr,
                       nullptr, rows);
        });
    }
    if (!vec)
      cuda::launch(layer_norm_dx_kernel<T>, blocks, 32 * kRowsPerBlock, 0, pg, px,
                   static_cast<const T*>(w), pm, pr, pa, static_cast<T*>(dx), rows, c);
    DL_CUDA_LAUNCH_CHECK();
    if (!want) return;
    if (!fused) {
      DL_CHECK(chunks <= 65535, "layer_norm",
               "too many rows (" << rows << ") for the cuda backward");
      const dim3 grid(unsigned((c + 255) / 256), unsigned(chunks));
      cuda::launch(layer_norm_dwb_partial_kernel<T>, grid, 256, 0, pg, px, pm, pr, part_w, part_b,
                   rows, c);
      DL_CUDA_LAUNCH_CHECK();
    }
    DL_CHECK((!accumulate || std::is_same_v<A, float>), "layer_norm",
             "accumulating f32 gradients needs an f32 accumulator");
    cuda::launch(layer_norm_dwb_final_kernel<T>, dim3(col_sum_blocks(c), 2), kColSumThreads, 0,
                 part_w, part_b, dw, db, chunks, c, accumulate);
    DL_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace driftless::ops::gpu
