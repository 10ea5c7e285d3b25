// SwiGLU, silu(gate) * up over rows of (gate | up), as one elementwise kernel each way: fp32
// math (f64 for f64), bf16 read and written once, silu(gate) never stored. bf16 rows of a
// multiple of 8 go 16 bytes at a time (the per-element kernels ran at a third of the
// memory bandwidth, BENCHMARKS.md); the math per element is the same, so are the bits.
#include <cstdint>

#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"
#include "engine/ops/cuda/swiglu.h"

namespace driftless::ops::gpu {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid_acc(float a) {
  return 1.0f / (1.0f + expf(-a));
}
__device__ __forceinline__ double sigmoid_acc(double a) {
  return 1.0 / (1.0 + exp(-a));
}

// out[r, j] = silu(x[r, j]) * x[r, f + j] for the rows * f outputs.
template <class T>
__global__ void swiglu_forward_kernel(const T* x, T* out, int64_t rows, int64_t f) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  const int64_t n = rows * f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, j = i - r * f;
    const A a = to_acc(x[r * 2 * f + j]), u = to_acc(x[r * 2 * f + f + j]);
    out[i] = from_acc<T>(a * sigmoid_acc(a) * u);
  }
}

// d gate = g * up * silu'(gate), d up = g * silu(gate); silu'(a) = s (1 + a (1 - s)).
template <class T>
__global__ void swiglu_backward_kernel(const T* g, const T* x, T* d, int64_t rows, int64_t f) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  const int64_t n = rows * f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, j = i - r * f;
    const A a = to_acc(x[r * 2 * f + j]), u = to_acc(x[r * 2 * f + f + j]), go = to_acc(g[i]);
    const A s = sigmoid_acc(a);
    d[r * 2 * f + j] = from_acc<T>(go * u * s * (A(1) + a * (A(1) - s)));
    d[r * 2 * f + f + j] = from_acc<T>(go * a * s);
  }
}

// The same two kernels over 16-byte units of 8 bf16: fu = f / 8 units per half row.
__global__ void swiglu_forward_units_kernel(const uint4* x, uint4* out, int64_t rows, int64_t fu) {
  cuda::dependent_kernel_begin();
  const int64_t n = rows * fu;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / fu, j = i - r * fu;
    float a[8], u[8], y[8];
    Bf16Pack::unpack(x[r * 2 * fu + j], a);
    Bf16Pack::unpack(x[r * 2 * fu + fu + j], u);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = a[e] * sigmoid_acc(a[e]) * u[e];
    out[i] = Bf16Pack::pack(y);
  }
}

__global__ void swiglu_backward_units_kernel(const uint4* g, const uint4* x, uint4* d,
                                             int64_t rows, int64_t fu) {
  cuda::dependent_kernel_begin();
  const int64_t n = rows * fu;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / fu, j = i - r * fu;
    float a[8], u[8], go[8], da[8], du[8];
    Bf16Pack::unpack(x[r * 2 * fu + j], a);
    Bf16Pack::unpack(x[r * 2 * fu + fu + j], u);
    Bf16Pack::unpack(g[i], go);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float s = sigmoid_acc(a[e]);
      da[e] = go[e] * u[e] * s * (1.f + a[e] * (1.f - s));
      du[e] = go[e] * a[e] * s;
    }
    d[r * 2 * fu + j] = Bf16Pack::pack(da);
    d[r * 2 * fu + fu + j] = Bf16Pack::pack(du);
  }
}

bool units_path(DType dtype, int64_t f, std::initializer_list<const void*> ptrs) {
  return dtype == DType::bf16 && f % 8 == 0 && aligned16(ptrs);
}

}  // namespace

void launch_swiglu_forward(DType dtype, const void* gate_up, void* out, int64_t rows, int64_t f) {
  if (rows * f == 0) return;
  if (units_path(dtype, f, {gate_up, out})) {
    cuda::launch(swiglu_forward_units_kernel, grid_for(rows * (f / 8), kThreads), kThreads, 0,
                 static_cast<const uint4*>(gate_up), static_cast<uint4*>(out), rows, f / 8);
    DL_CUDA_LAUNCH_CHECK();
    return;
  }
  dispatch_float("swiglu", dtype, [&](auto z) {
    using T = decltype(z);
    cuda::launch(swiglu_forward_kernel<T>, grid_for(rows * f, kThreads), kThreads, 0,
                 static_cast<const T*>(gate_up), static_cast<T*>(out), rows, f);
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_swiglu_backward(DType dtype, const void* g, const void* gate_up, void* d, int64_t rows,
                            int64_t f) {
  if (rows * f == 0) return;
  if (units_path(dtype, f, {g, gate_up, d})) {
    cuda::launch(swiglu_backward_units_kernel, grid_for(rows * (f / 8), kThreads), kThreads, 0,
                 static_cast<const uint4*>(g), static_cast<const uint4*>(gate_up),
                 static_cast<uint4*>(d), rows, f / 8);
    DL_CUDA_LAUNCH_CHECK();
    return;
  }
  dispatch_float("swiglu", dtype, [&](auto z) {
    using T = decltype(z);
    cuda::launch(swiglu_backward_kernel<T>, grid_for(rows * f, kThreads), kThreads, 0,
                 static_cast<const T*>(g), static_cast<const T*>(gate_up), static_cast<T*>(d), rows,
                 f);
  });
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace driftless::ops::gpu
