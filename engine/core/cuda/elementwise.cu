// Strided copy (with dtype conversion), fill and accumulate kernels (see elementwise.cuh).
#include <cuda_bf16.h>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/elementwise.cuh"

namespace driftless::cuda {
namespace {

__device__ int64_t element_offset(const StridedView& v, int64_t linear) {
  int64_t off = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    int64_t i = linear % v.shape[d];
    linear /= v.shape[d];
    off += i * v.strides[d];
  }
  return off;
}

template <class T>
__device__ double load(const void* p, int64_t off) {
  if constexpr (std::is_same_v<T, bf16>) {
    return double(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[off]));
  } else {
    return double(static_cast<const T*>(p)[off]);
  }
}

template <class T>
__device__ void store(void* p, int64_t off, double v) {
  if constexpr (std::is_same_v<T, bf16>) {
    static_cast<__nv_bfloat16*>(p)[off] = __float2bfloat16_rn(float(v));
  } else {
    static_cast<T*>(p)[off] = T(v);
  }
}

template <class D, class S>
__global__ void copy_kernel(StridedView dst, StridedView src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store<D>(dst.data, element_offset(dst, i), load<S>(src.data, element_offset(src, i)));
}

template <class D>
__global__ void fill_kernel(StridedView dst, double value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store<D>(dst.data, element_offset(dst, i), value);
}

template <class D>
__global__ void add_kernel(StridedView dst, StridedView src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = element_offset(dst, i);
    store<D>(dst.data, o, load<D>(dst.data, o) + load<D>(src.data, element_offset(src, i)));
  }
}

unsigned blocks_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  return unsigned(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

}  // namespace

void launch_copy(const StridedView& dst, const StridedView& src, int64_t numel) {
  if (numel == 0) return;
  visit_dtype(dst.dtype, [&](auto zd) {
    visit_dtype(src.dtype, [&](auto zs) {
      copy_kernel<decltype(zd), decltype(zs)><<<blocks_for(numel), 256>>>(dst, src, numel);
    });
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_fill(const StridedView& dst, double value, int64_t numel) {
  if (numel == 0) return;
  visit_dtype(dst.dtype, [&](auto zd) {
    fill_kernel<decltype(zd)><<<blocks_for(numel), 256>>>(dst, value, numel);
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_add(const StridedView& dst, const StridedView& src, int64_t numel) {
  if (numel == 0) return;
  visit_dtype(dst.dtype, [&](auto zd) {
    add_kernel<decltype(zd)><<<blocks_for(numel), 256>>>(dst, src, numel);
  });
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace driftless::cuda
