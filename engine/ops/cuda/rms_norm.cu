// RMS norm over the last dim (Llama's RMSNorm), laid out as layer norm's kernels (norm.cu):
// one warp per row with fp32 (f64 for f64) statistics; the backward makes dx per row and
// sums dweight over fixed chunks of rows, then over the chunks in order (no atomics:
// bitwise reproducible).
#include <cstdint>

#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"

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

}  // namespace

void launch_rms_norm_forward(DType dtype, const void* x, const void* w, void* out, void* rstd,
                             int64_t rows, int64_t c, double eps) {
  if (rows == 0) return;
  dispatch_float("rms_norm", dtype, [&](auto z) {
    using T = decltype(z);
    using A = acc_t<T>;
    const unsigned blocks = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
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
    const int64_t chunks = rms_norm_chunks(rows);
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
