// RMS norm over the last dim (Llama's RMSNorm), laid out as layer norm's kernels (norm.cu):
// one warp per row with fp32 (f64 for f64) statistics; the backward makes dx per row and
// sums dweight over fixed chunks of rows, then over the chunks in order (no atomics:
// bitwise reproducible). bf16 rows of up to kMaxUnits * 32 16-byte units (c <= 1024, a
// multiple of 8) keep a row in registers, 8 elements a load, and the backward sums
// dweight's partials of its 32 rows in the same pass (no second read of g and x).
#include <cstdint>

#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"
#include "engine/ops/cuda/rms_norm.h"

namespace driftless::ops::gpu {
namespace {

constexpr int kRowsPerBlock = 8;    // warps per block, one row each
constexpr int64_t kChunkRows = 32;  // rows per partial of dweight
constexpr int kPartialThreads = 256;

__device__ __forceinline__ float rsqrt_acc(float v) {
  return 1.0f / sqrtf(v);
}
__device__ __forceinline__ double rsqrt_acc(double v) {
  return 1.0 / sqrt(v);
}

// The normalised value as HF's LlamaRMSNorm makes it: x * rstd rounded to x's dtype, which
// the weight then multiplies (one more rounding).
template <class T>
__device__ __forceinline__ T rms_out(T x, acc_t<T> rs, T w) {
  return from_acc<T>(to_acc(from_acc<T>(to_acc(x) * rs)) * to_acc(w));
}

template <class T>
__global__ void rms_norm_forward_kernel(const T* x, const T* w, T* out, acc_t<T>* rstd,
                                        int64_t rows, int64_t c, double eps) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (r >= rows) return;
  const T* xr = x + r * c;
  A s = 0;
  for (int64_t i = lane; i < c; i += 32) {
    const A v = to_acc(xr[i]);
    s += v * v;
  }
  const A rs = rsqrt_acc(warp_sum(s) / A(c) + A(eps));
  if (lane == 0) rstd[r] = rs;
  T* yr = out + r * c;
  for (int64_t i = lane; i < c; i += 32) yr[i] = rms_out<T>(xr[i], rs, w[i]);
}

// dx = rstd * (d - xhat * mean(d * xhat)) with d = g * w, xhat = x * rstd; add (or null): a
// gradient of x from elsewhere (the residual stream's), summed into dx before the rounding.
template <class T>
__global__ void rms_norm_dx_kernel(const T* g, const T* x, const T* w, const acc_t<T>* rstd,
                                   const T* add, T* dx, int64_t rows, int64_t c) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (r >= rows) return;
  const T* xr = x + r * c;
  const T* gr = g + r * c;
  const A rs = rstd[r];
  A s = 0;
  for (int64_t i = lane; i < c; i += 32) s += to_acc(gr[i]) * to_acc(w[i]) * (to_acc(xr[i]) * rs);
  const A mean_dx = warp_sum(s) / A(c);
  T* dr = dx + r * c;
  for (int64_t i = lane; i < c; i += 32) {
    A v = rs * (to_acc(gr[i]) * to_acc(w[i]) - to_acc(xr[i]) * rs * mean_dx);
    if (add) v += to_acc(add[r * c + i]);
    dr[i] = from_acc<T>(v);
  }
}

// Pass 1 of dweight: part[chunk][col] = sum over the chunk's rows of g * xhat.
template <class T>
__global__ void rms_norm_dw_partial_kernel(const T* g, const T* x, const acc_t<T>* rstd,
                                           acc_t<T>* part, int64_t rows, int64_t c) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (col >= c) return;
  const int64_t r0 = chunk * kChunkRows, r1 = min(rows, r0 + kChunkRows);
  A acc = 0;
  for (int64_t r = r0; r < r1; ++r)
    acc += to_acc(g[r * c + col]) * (to_acc(x[r * c + col]) * rstd[r]);
  part[chunk * c + col] = acc;
}

// Pass 2: the chunks of each column in a fixed order, written as T or, with `accumulate`
// (an f32 accumulator), added to the weight's f32 gradient storage.
template <class T>
__global__ void rms_norm_dw_final_kernel(const acc_t<T>* part, void* dw, int64_t chunks, int64_t c,
                                         bool accumulate) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  col_sums(part, chunks, c, [&](int64_t col, A v) {
    if (accumulate)
      static_cast<float*>(dw)[col] += float(v);
    else
      static_cast<T*>(dw)[col] = from_acc<T>(v);
  });
}

constexpr int kMaxUnits = 4;  // 16-byte units per lane in the unit kernels: c <= 1024

// rms_norm_forward_kernel over units: cu = c / 8 units per row, lane l holds l, l + 32, ...
__global__ void rms_norm_forward_units_kernel(const uint4* x, const uint4* w, uint4* out,
                                              float* rstd, int64_t rows, int cu, double eps) {
  cuda::dependent_kernel_begin();
  const int lane = threadIdx.x & 31;
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5);
  if (r >= rows) return;
  float xv[kMaxUnits][8];
  float s = 0;
#pragma unroll
  for (int k = 0; k < kMaxUnits; ++k) {
    const int u = lane + 32 * k;
    if (u >= cu) break;
    Bf16Pack::unpack(x[r * cu + u], xv[k]);
#pragma unroll
    for (int e = 0; e < 8; ++e) s += xv[k][e] * xv[k][e];
  }
  const float rs = rsqrt_acc(warp_sum(s) / float(8 * cu) + float(eps));
  if (lane == 0) rstd[r] = rs;
#pragma unroll
  for (int k = 0; k < kMaxUnits; ++k) {
    const int u = lane + 32 * k;
    if (u >= cu) break;
    float wv[8], y[8];
    Bf16Pack::unpack(w[u], wv);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = __bfloat162float(__float2bfloat16_rn(xv[k][e] * rs)) * wv[e];
    out[r * cu + u] = Bf16Pack::pack(y);
  }
}

// rms_norm_dx_kernel and rms_norm_dw_partial_kernel in one pass over units: block b takes
// the kChunkRows rows of chunk b, warp j its rows j, j + 8, ...; U units a lane at most. With
// part, each warp adds its rows' g * xhat into its own shared-memory sums (lane fastest:
// conflict-free), then the warps' sums are added in warp order (fixed: reproducible). The
// row's g and x stay in registers between its two passes; w is re-read (L1) per row.
template <int U>
__global__ void __launch_bounds__(32 * kRowsPerBlock)
    rms_norm_backward_units_kernel(const uint4* g, const uint4* x, const uint4* w,
                                   const float* rstd, const uint4* add, uint4* dx, float* part,
                                   int64_t rows, int cu) {
  cuda::dependent_kernel_begin();
  __shared__ float sums[kRowsPerBlock][U * 8 * 32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int c = 8 * cu;
  float* mine = sums[warp];
  if (part)
    for (int i = lane; i < U * 8 * 32; i += 32) mine[i] = 0.f;
  const int64_t r_end = min(rows, int64_t(blockIdx.x + 1) * kChunkRows);
  for (int64_t r = int64_t(blockIdx.x) * kChunkRows + warp; r < r_end; r += kRowsPerBlock) {
    const float rs = rstd[r];
    float gw[U][8], xh[U][8];  // g * w and x * rstd
    float s = 0;
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int u = lane + 32 * k;
      if (u >= cu) break;
      float gv[8], wv[8];
      Bf16Pack::unpack(g[r * cu + u], gv);
      Bf16Pack::unpack(x[r * cu + u], xh[k]);
      Bf16Pack::unpack(w[u], wv);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        xh[k][e] *= rs;
        gw[k][e] = gv[e] * wv[e];
        s += gw[k][e] * xh[k][e];
        if (part) mine[(k * 8 + e) * 32 + lane] += gv[e] * xh[k][e];
      }
    }
    const float mean_dx = warp_sum(s) / float(c);
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int u = lane + 32 * k;
      if (u >= cu) break;
      float v[8], av[8];
      if (add) Bf16Pack::unpack(add[r * cu + u], av);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        v[e] = rs * (gw[k][e] - xh[k][e] * mean_dx);
        if (add) v[e] += av[e];
      }
      dx[r * cu + u] = Bf16Pack::pack(v);
    }
  }
  if (!part) return;
  __syncthreads();
  for (int col = threadIdx.x; col < c; col += blockDim.x) {
    const int u = col / 8, e = col - 8 * u;
    const int at = ((u / 32) * 8 + e) * 32 + (u % 32);
    float t = 0;
    for (int j = 0; j < kRowsPerBlock; ++j) t += sums[j][at];
    part[blockIdx.x * int64_t(c) + col] = t;
  }
}

bool units_path(DType dtype, int64_t c, std::initializer_list<const void*> ptrs) {
  return dtype == DType::bf16 && c % 8 == 0 && c <= kMaxUnits * 32 * 8 && aligned16(ptrs);
}

}  // namespace

void launch_rms_norm_forward(DType dtype, const void* x, const void* w, void* out, void* rstd,
                             int64_t rows, int64_t c, double eps) {
  if (rows == 0) return;
  const unsigned blocks = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  if (units_path(dtype, c, {x, w, out})) {
    cuda::launch(rms_norm_forward_units_kernel, blocks, 32 * kRowsPerBlock, 0,
                 static_cast<const uint4*>(x), static_cast<const uint4*>(w),
                 static_cast<uint4*>(out), static_cast<float*>(rstd), rows, int(c / 8), eps);
    DL_CUDA_LAUNCH_CHECK();
    return;
  }
  dispatch_float("rms_norm", dtype, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    cuda::launch(rms_norm_forward_kernel<T>, blocks, 32 * kRowsPerBlock, 0,
                 static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(out),
                 static_cast<A*>(rstd), rows, c, eps);
  });
  DL_CUDA_LAUNCH_CHECK();
}

int64_t rms_norm_chunks(int64_t rows) {
  return (rows + kChunkRows - 1) / kChunkRows;
}

void launch_rms_norm_backward(DType dtype, const void* g, const void* x, const void* w,
                              const void* rstd, const void* add, void* dx, void* dw, void* scratch,
                              int64_t rows, int64_t c, bool accumulate) {
  if (rows == 0) return;
  const int64_t chunks = rms_norm_chunks(rows);
  if (units_path(dtype, c, {g, x, w, add, dx})) {
    DL_CHECK(chunks <= int64_t(0x7fffffff), "rms_norm", "too many rows (" << rows << ")");
    float* part = dw ? static_cast<float*>(scratch) : nullptr;
    auto run = [&](auto kernel) {
      cuda::launch(kernel, unsigned(chunks), 32 * kRowsPerBlock, 0, static_cast<const uint4*>(g),
                   static_cast<const uint4*>(x), static_cast<const uint4*>(w),
                   static_cast<const float*>(rstd), static_cast<const uint4*>(add),
                   static_cast<uint4*>(dx), part, rows, int(c / 8));
    };
    const int64_t per_lane = (c / 8 + 31) / 32;  // units a lane holds: 1 ... kMaxUnits
    if (per_lane == 1) run(rms_norm_backward_units_kernel<1>);
    else if (per_lane == 2) run(rms_norm_backward_units_kernel<2>);
    else if (per_lane == 3) run(rms_norm_backward_units_kernel<3>);
    else run(rms_norm_backward_units_kernel<4>);
    DL_CUDA_LAUNCH_CHECK();
    if (!dw) return;
    cuda::launch(rms_norm_dw_final_kernel<bf16_t>, col_sum_blocks(c), kColSumThreads, 0,
                 static_cast<const float*>(part), dw, chunks, c, accumulate);
    DL_CUDA_LAUNCH_CHECK();
    return;
  }
  dispatch_float("rms_norm", dtype, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const T* pg = static_cast<const T*>(g);
    const T* px = static_cast<const T*>(x);
    const A* pr = static_cast<const A*>(rstd);
    const unsigned blocks = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    cuda::launch(rms_norm_dx_kernel<T>, blocks, 32 * kRowsPerBlock, 0, pg, px,
                 static_cast<const T*>(w), pr, static_cast<const T*>(add), static_cast<T*>(dx),
                 rows, c);
    DL_CUDA_LAUNCH_CHECK();
    if (!dw) return;
    DL_CHECK(chunks <= 65535, "rms_norm", "too many rows (" << rows << ") for the cuda backward");
    DL_CHECK((!accumulate || std::is_same_v<A, float>), "rms_norm",
             "accumulating f32 gradients needs an f32 accumulator");
    A* part = static_cast<A*>(scratch);
    const dim3 grid(unsigned((c + kPartialThreads - 1) / kPartialThreads), unsigned(chunks));
    cuda::launch(rms_norm_dw_partial_kernel<T>, grid, kPartialThreads, 0, pg, px, pr, part, rows,
                 c);
    DL_CUDA_LAUNCH_CHECK();
    cuda::launch(rms_norm_dw_final_kernel<T>, col_sum_blocks(c), kColSumThreads, 0,
                 static_cast<const A*>(part), dw, chunks, c, accumulate);
    DL_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace driftless::ops::gpu
