// Rotary position embedding of fused QKV rows (HF Llama's rotate_half), one block per row:
// the row's cos/sin are made once into shared memory with full-range sincosf (not __sinf,
// whose error grows with the angle: positions reach 1e6 radians), then every Q and K head
// turns by them and V is copied. fp32 math (f64 for f64), bf16 or f32 in and out. bf16 rows
// of 16-byte units (head dim a multiple of 16) take one warp per row and 8 elements a load:
// the same math per element at twice the speed of a block per row (BENCHMARKS.md).
#include <cstdint>

#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"
#include "engine/ops/cuda/rope.h"

namespace driftless::ops::gpu {
namespace {

constexpr int kThreads = 256;

// The angle is the f32 product HF makes (f32(pos) * inv_freq); f64 takes its cos/sin in double.
__device__ __forceinline__ void sincos_acc(float angle, float* s, float* c) {
  sincosf(angle, s, c);
}
__device__ __forceinline__ void sincos_acc(float angle, double* s, double* c) {
  sincos(double(angle), s, c);
}

template <class T>
__global__ void rope_kernel(const T* x, const int32_t* positions, T* out, int64_t w,
                            int64_t rotated, int64_t d, RopeFreqs freqs, bool inverse) {
  cuda::dependent_kernel_begin();
  using A = acc_t<T>;
  __shared__ A cs[kRopeMaxHalf], sn[kRopeMaxHalf];
  const int64_t r = blockIdx.x, half = d / 2;
  const float p = float(positions[r]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    A s, c;
    sincos_acc(p * freqs.inv_freq[i], &s, &c);
    cs[i] = c;
    sn[i] = inverse ? -s : s;
  }
  __syncthreads();
  const T* xr = x + r * w;
  T* yr = out + r * w;
  for (int64_t e = threadIdx.x; e < rotated * half; e += blockDim.x) {
    const int64_t h = e / half, i = e - h * half;
    const A a = to_acc(xr[h * d + i]), b = to_acc(xr[h * d + half + i]);
    yr[h * d + i] = from_acc<T>(a * cs[i] - b * sn[i]);
    yr[h * d + half + i] = from_acc<T>(b * cs[i] + a * sn[i]);
  }
  for (int64_t e = rotated * d + threadIdx.x; e < w; e += blockDim.x) yr[e] = xr[e];
}

constexpr int kUnitRows = 8;  // warps per block of rope_units_kernel, one row each

// rope_kernel over 16-byte units of 8 bf16: wu units per row, d % 16 == 0, so each unit of
// a head's first half pairs with the unit half / 8 further on.
__global__ void rope_units_kernel(const uint4* x, const int32_t* positions, uint4* out,
                                  int64_t rows, int64_t wu, int rotated, int d, RopeFreqs freqs,
                                  bool inverse) {
  cuda::dependent_kernel_begin();
  __shared__ float cs[kUnitRows][kRopeMaxHalf], sn[kUnitRows][kRopeMaxHalf];
  const int warp = int(threadIdx.x >> 5), lane = int(threadIdx.x & 31);
  const int64_t r = blockIdx.x * int64_t(kUnitRows) + warp;
  if (r >= rows) return;
  const int half = d / 2, hu = half / 8;
  const float p = float(positions[r]);
  for (int i = lane; i < half; i += 32) {
    float s, c;
    sincos_acc(p * freqs.inv_freq[i], &s, &c);
    cs[warp][i] = c;
    sn[warp][i] = inverse ? -s : s;
  }
  __syncwarp();
  const uint4* xr = x + r * wu;
  uint4* yr = out + r * wu;
  for (int e = lane; e < rotated * hu; e += 32) {
    const int h = e / hu, i0 = (e - h * hu) * 8;
    const int ua = (h * d + i0) / 8, ub = ua + hu;
    float a[8], b[8], ya[8], yb[8];
    Bf16Pack::unpack(xr[ua], a);
    Bf16Pack::unpack(xr[ub], b);
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const float c = cs[warp][i0 + t], s = sn[warp][i0 + t];
      ya[t] = a[t] * c - b[t] * s;
      yb[t] = b[t] * c + a[t] * s;
    }
    yr[ua] = Bf16Pack::pack(ya);
    yr[ub] = Bf16Pack::pack(yb);
  }
  for (int64_t e = int64_t(rotated) * d / 8 + lane; e < wu; e += 32) yr[e] = xr[e];
}

}  // namespace

void launch_rope(DType dtype, const void* x, const int32_t* positions, void* out, int64_t rows,
                 int64_t w, int64_t rotated, int64_t d, const RopeFreqs& freqs, bool inverse) {
  if (rows == 0 || w == 0) return;
  DL_CHECK(d / 2 <= kRopeMaxHalf, "rope",
           "head dim " << d << " is over the cuda kernel's " << 2 * kRopeMaxHalf);
  DL_CHECK(rows <= int64_t(0x7fffffff), "rope", "too many rows (" << rows << ") for one grid");
  if (dtype == DType::bf16 && d % 16 == 0 && w % 8 == 0 && aligned16({x, out})) {
    cuda::launch(rope_units_kernel, unsigned((rows + kUnitRows - 1) / kUnitRows), 32 * kUnitRows,
                 0, static_cast<const uint4*>(x), positions, static_cast<uint4*>(out), rows, w / 8,
                 int(rotated), int(d), freqs, inverse);
    DL_CUDA_LAUNCH_CHECK();
    return;
  }
  dispatch_float("rope", dtype, [&](auto z) {
    using T = decltype(z);
    cuda::launch(rope_kernel<T>, unsigned(rows), kThreads, 0, static_cast<const T*>(x), positions,
                 static_cast<T*>(out), w, rotated, d, freqs, inverse);
  });
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace driftless::ops::gpu
