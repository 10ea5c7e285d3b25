// Embedding gather and its deterministic backward: every weight row is owned by one block
// that sums the gradient rows of its positions in increasing position order (the CPU
// order), from a per-row position list built on the host. No atomics.
#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"
#include "engine/ops/cuda/embedding.h"

namespace driftless::ops::gpu {
namespace {

template <class T>
__global__ void embedding_forward_kernel(const T* w, const int64_t* ids, T* out, int64_t n,
                                         int64_t c) {
  cuda::dependent_kernel_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * c;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = w[ids[i / c] * c + i % c];
}

// The same gather, 16 bytes per thread: rows of `units` 16-byte units, aligned.
__global__ void embedding_forward_units_kernel(const uint4* w, const int64_t* ids, uint4* out,
                                               int64_t n, int64_t units) {
  cuda::dependent_kernel_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * units;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = w[ids[i / units] * units + i % units];
}

template <class T>
__global__ void embedding_backward_kernel(const T* g, const int64_t* offsets,
                                          const int64_t* positions, T* dw, int64_t v, int64_t c) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  for (int64_t r = blockIdx.x; r < v; r += gridDim.x) {
    const int64_t k0 = offsets[r], k1 = offsets[r + 1];
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      A acc = 0;
      for (int64_t k = k0; k < k1; ++k) acc += to_acc(g[positions[k] * c + j]);
      dw[r * c + j] = from_acc<T>(acc);
    }
  }
}

// Row rows[b] of f32 storage += the same sums as embedding_backward_kernel's, in f32.
template <class T>
__global__ void embedding_backward_into_kernel(const T* g, const int64_t* offsets,
                                               const int64_t* positions, const int64_t* rows,
                                               int64_t n_rows, float* into, int64_t c) {
  cuda::dependent_kernel_begin();
  for (int64_t b = blockIdx.x; b < n_rows; b += gridDim.x) {
    const int64_t r = rows[b], k0 = offsets[r], k1 = offsets[r + 1];
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      float acc = 0;
      for (int64_t k = k0; k < k1; ++k) acc += float(to_acc(g[positions[k] * c + j]));
      into[r * c + j] += acc;
    }
  }
}

// The same sums, 16 bytes of g (P elements) per thread: rows of `units` units, aligned; each
// element's sum in the same order, so the same bits.
template <class T>
__global__ void embedding_backward_into_units_kernel(const uint4* g, const int64_t* offsets,
                                                     const int64_t* positions, const int64_t* rows,
                                                     int64_t n_rows, float* into, int64_t units) {
  cuda::dependent_kernel_begin();
  constexpr int P = 16 / int(sizeof(T));
  for (int64_t b = blockIdx.x; b < n_rows; b += gridDim.x) {
    const int64_t r = rows[b], k0 = offsets[r], k1 = offsets[r + 1];
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
      float acc[P];
#pragma unroll
      for (int j = 0; j < P; ++j) acc[j] = 0.f;
      for (int64_t k = k0; k < k1; ++k) {
        const uint4 raw = g[positions[k] * units + u];
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int j = 0; j < P; ++j) acc[j] += float(to_acc(e[j]));
      }
      float4* dst = reinterpret_cast<float4*>(into + (r * units + u) * P);
#pragma unroll
      for (int q = 0; q < P / 4; ++q) {
        float4 d = dst[q];
        d.x += acc[4 * q], d.y += acc[4 * q + 1], d.z += acc[4 * q + 2], d.w += acc[4 * q + 3];
        dst[q] = d;
      }
    }
  }
}

// Launch shape of the backward kernels: a block per weight row (grid-stride past the cap),
// a thread per column (or 16-byte unit) up to 256, whole warps.
unsigned row_blocks(int64_t n_rows) {
  return unsigned(n_rows < 65535 * 16 ? n_rows : 65535 * 16);
}
int row_threads(int64_t width) {
  return width >= 256 ? 256 : int((width + 31) / 32 * 32);
}

}  // namespace

void launch_embedding_forward(DType dtype, const void* w, const int64_t* ids, void* out, int64_t n,
                              int64_t c) {
  if (n * c == 0) return;
  dispatch_float("embedding", dtype, [&](auto z) {
    using T = decltype(z);
    constexpr int64_t per = 16 / int64_t(sizeof(T));
    if (c % per == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(out) % 16 == 0) {
      const int64_t units = c / per;
      cuda::launch(embedding_forward_units_kernel, grid_for(n * units, 256), 256, 0,
                   static_cast<const uint4*>(w), ids, static_cast<uint4*>(out), n, units);
      return;
    }
    cuda::launch(embedding_forward_kernel<T>, grid_for(n * c, 256), 256, 0,
                 static_cast<const T*>(w), ids, static_cast<T*>(out), n, c);
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_embedding_backward(DType dtype, const void* g, const int64_t* offsets,
                               const int64_t* positions, void* dw, int64_t v, int64_t c) {
  if (v * c == 0) return;
  dispatch_float("embedding", dtype, [&](auto z) {
    using T = decltype(z);
    cuda::launch(embedding_backward_kernel<T>, row_blocks(v), row_threads(c), 0,
                 static_cast<const T*>(g), offsets, positions, static_cast<T*>(dw), v, c);
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_embedding_backward_into(DType dtype, const void* g, const int64_t* offsets,
                                    const int64_t* positions, const int64_t* rows, int64_t n_rows,
                                    float* into, int64_t c) {
  if (n_rows * c == 0) return;
  DL_CHECK(dtype == DType::f32 || dtype == DType::bf16, "embedding",
           "f32 gradient storage takes f32 or bf16 gradients, got " << dtype_name(dtype));
  auto go = [&](auto z) {
    using T = decltype(z);
    constexpr int64_t per = 16 / int64_t(sizeof(T));  // elements per 16 bytes of g
    if (c % per == 0 && reinterpret_cast<uintptr_t>(g) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(into) % 16 == 0)
      cuda::launch(embedding_backward_into_units_kernel<T>, row_blocks(n_rows),
                   row_threads(c / per), 0, static_cast<const uint4*>(g), offsets, positions, rows,
                   n_rows, into, c / per);
    else
      cuda::launch(embedding_backward_into_kernel<T>, row_blocks(n_rows), row_threads(c), 0,
                   static_cast<const T*>(g), offsets, positions, rows, n_rows, into, c);
  };
  if (dtype == DType::f32)
    go(float{});
  else
    go(bf16_t{});
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace driftless::ops::gpu
