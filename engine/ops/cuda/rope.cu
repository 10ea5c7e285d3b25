// Rotary position embedding of fused QKV rows (HF Llama's rotate_half), one block per row:
// the row's cos/sin are made once into shared memory with full-range sincosf (not __sinf,
// whose error grows with the angle: positions reach 1e6 radians), then every Q and K head
// turns by them and V is copied. fp32 math (f64 for f64), bf16 or f32 in and out.
#include <cstdint>

#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"

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

}  // namespace

void launch_rope(DType dtype, const void* x, const int32_t* positions, void* out, int64_t rows,
                 int64_t w, int64_t rotated, int64_t d, const RopeFreqs& freqs, bool inverse) {
  if (rows == 0 || w == 0) return;
  DL_CHECK(d / 2 <= kRopeMaxHalf, "rope",
           "head dim " << d << " is over the cuda kernel's " << 2 * kRopeMaxHalf);
  DL_CHECK(rows <= int64_t(0x7fffffff), "rope", "too many rows (" << rows << ") for one grid");
  dispatch_float("rope", dtype, [&](auto z) {
    using T = decltype(z);
    cuda::launch(rope_kernel<T>, unsigned(rows), kThreads, 0, static_cast<const T*>(x), positions,
                 static_cast<T*>(out), w, rotated, d, freqs, inverse);
  });
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace driftless::ops::gpu
