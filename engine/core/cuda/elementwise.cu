// Strided copy (with dtype conversion), fill and accumulate kernels (see elementwise.cuh).
//
// Speed: each view is coalesced on the host first (size-1 dims dropped, dims that are
// contiguous with each other merged), so a contiguous tensor is one linear run. Then:
// - same-dtype copies of two linear runs are one cudaMemcpyAsync, zero fills of one a
//   cudaMemsetAsync;
// - same-dtype strided copies whose rows are whole 16-byte units move a unit per thread,
//   and so do accumulations of two aligned linear runs;
// - kernels index linear runs directly, and strided views in 32-bit arithmetic whenever
//   every offset fits (64-bit division is emulated and many times slower);
// - offsets come from strided_offset.cuh, which reads the views' arrays in place.
#include <cuda_bf16.h>

#include <cmath>
#include <initializer_list>
#include <type_traits>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/elementwise.cuh"
#include "engine/core/cuda/launch.cuh"
#include "engine/core/cuda/stream.h"
#include "engine/core/cuda/strided_offset.cuh"

namespace driftless::cuda {
namespace {

enum Mode : int { kLinear = 0, kStrided32 = 1, kStrided64 = 2 };

template <int M>
__device__ __forceinline__ int64_t offset_at(const StridedView& v, int64_t i) {
  if constexpr (M == kLinear) {
    return i;
  } else if constexpr (M == kStrided32) {
    return strided_offset<int32_t>(v.rank, v.shape, v.strides, int32_t(i));
  } else {
    return strided_offset<int64_t>(v.rank, v.shape, v.strides, i);
  }
}

template <class T>
__device__ __forceinline__ double load(const void* p, int64_t off) {
  if constexpr (std::is_same_v<T, bf16>) {
    return double(__bfloat162float(static_cast<const __nv_bfloat16*>(p)[off]));
  } else {
    return double(static_cast<const T*>(p)[off]);
  }
}

template <class T>
__device__ __forceinline__ void store(void* p, int64_t off, double v) {
  if constexpr (std::is_same_v<T, bf16>) {
    static_cast<__nv_bfloat16*>(p)[off] = __float2bfloat16_rn(float(v));
  } else {
    static_cast<T*>(p)[off] = T(v);
  }
}

template <class D, class S, int M>
__global__ void copy_kernel(StridedView dst, StridedView src, int64_t n) {
  cuda::dependent_kernel_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store<D>(dst.data, offset_at<M>(dst, i), load<S>(src.data, offset_at<M>(src, i)));
}

// A same-dtype copy in 16-byte units: the views count in units (see vector_units), so each
// thread moves 16 bytes with one offset computation instead of one per element.
template <int M>
__global__ void copy_units_kernel(StridedView dst, StridedView src, int64_t n) {
  cuda::dependent_kernel_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    static_cast<uint4*>(dst.data)[offset_at<M>(dst, i)] =
        static_cast<const uint4*>(src.data)[offset_at<M>(src, i)];
}

template <class D, int M>
__global__ void fill_kernel(StridedView dst, double value, int64_t n) {
  cuda::dependent_kernel_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    store<D>(dst.data, offset_at<M>(dst, i), value);
}

// dst = a + b over linear runs in 16-byte units (all 16-byte aligned; dst may be a): each
// thread adds a unit of elements with add_kernel's per-element arithmetic (the same bits).
template <class D>
__global__ void add3_units_kernel(void* dst, const void* a, const void* b, int64_t units) {
  cuda::dependent_kernel_begin();
  constexpr int kPer = 16 / int(sizeof(D));
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < units;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint4 x = static_cast<const uint4*>(a)[i];
    const uint4 y = static_cast<const uint4*>(b)[i];
#pragma unroll
    for (int e = 0; e < kPer; ++e) store<D>(&x, e, load<D>(&x, e) + load<D>(&y, e));
    static_cast<uint4*>(dst)[i] = x;
  }
}

template <class D, int M>
__global__ void add_kernel(StridedView dst, StridedView src, int64_t n) {
  cuda::dependent_kernel_begin();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = offset_at<M>(dst, i);
    store<D>(dst.data, o, load<D>(dst.data, o) + load<D>(src.data, offset_at<M>(src, i)));
  }
}

unsigned blocks_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  return unsigned(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

// v with size-1 dims dropped and each dim merged into the previous one when the two are
// contiguous with each other: the same row-major element -> offset map, fewer dims.
StridedView coalesced(const StridedView& v) {
  StridedView r = v;
  r.rank = 0;
  for (int d = 0; d < v.rank; ++d) {
    if (v.shape[d] == 1) continue;
    if (r.rank > 0 && r.strides[r.rank - 1] == v.strides[d] * v.shape[d]) {
      r.shape[r.rank - 1] *= v.shape[d];
      r.strides[r.rank - 1] = v.strides[d];
    } else {
      r.shape[r.rank] = v.shape[d];
      r.strides[r.rank] = v.strides[d];
      ++r.rank;
    }
  }
  if (r.rank == 0) {  // one element
    r.rank = 1;
    r.shape[0] = 1;
    r.strides[0] = 1;
  }
  return r;
}

bool is_linear(const StridedView& v) {
  return v.rank == 1 && v.strides[0] == 1;
}

// v (coalesced) recounted in 16-byte units, when its innermost dim is contiguous and every
// row of it starts on a 16-byte boundary and holds whole units; false otherwise.
bool vector_units(const StridedView& v, StridedView* out) {
  const int64_t per = 16 / int64_t(dtype_size(v.dtype));
  const int last = v.rank - 1;
  if (per <= 1 || v.strides[last] != 1 || v.shape[last] % per != 0 ||
      reinterpret_cast<uintptr_t>(v.data) % 16 != 0)
    return false;
  for (int d = 0; d < last; ++d)
    if (v.strides[d] % per != 0) return false;
  *out = v;
  out->shape[last] /= per;
  for (int d = 0; d < last; ++d) out->strides[d] /= per;
  return true;
}

bool fits32(const StridedView& v, int64_t numel) {
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  int64_t reach = 0;
  for (int d = 0; d < v.rank; ++d) {
    if (v.strides[d] < 0 || v.strides[d] > kMax) return false;
    reach += (v.shape[d] - 1) * v.strides[d];
  }
  return numel <= kMax && reach <= kMax;
}

// The mode every view of one launch can use.
int mode_of(std::initializer_list<const StridedView*> views, int64_t numel) {
  bool linear = true, small = true;
  for (const StridedView* v : views) {
    linear = linear && is_linear(*v);
    small = small && fits32(*v, numel);
  }
  return linear ? kLinear : small ? kStrided32 : kStrided64;
}

template <class F>
void with_mode(int mode, F&& f) {
  if (mode == kLinear) return f(std::integral_constant<int, kLinear>{});
  if (mode == kStrided32) return f(std::integral_constant<int, kStrided32>{});
  f(std::integral_constant<int, kStrided64>{});
}

}  // namespace

void launch_copy(const StridedView& dst_in, const StridedView& src_in, int64_t numel) {
  if (numel == 0) return;
  const StridedView dst = coalesced(dst_in), src = coalesced(src_in);
  const int mode = mode_of({&dst, &src}, numel);
  if (mode == kLinear && dst.dtype == src.dtype) {
    DL_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, size_t(numel) * dtype_size(dst.dtype),
                                  cudaMemcpyDeviceToDevice, compute_stream()));
    return;
  }
  StridedView du, su;
  if (dst.dtype == src.dtype && vector_units(dst, &du) && vector_units(src, &su)) {
    // Strided same-dtype copies (a K/V slice into the interleaved buffer, a column block of
    // a fused projection) move 16 bytes per offset computation.
    const int64_t units = numel / (16 / int64_t(dtype_size(dst.dtype)));
    with_mode(mode_of({&du, &su}, units), [&](auto m) {
      cuda::launch(copy_units_kernel<decltype(m)::value>, blocks_for(units), 256, 0, du, su, units);
    });
    DL_CUDA_LAUNCH_CHECK();
    return;
  }
  visit_dtype(dst.dtype, [&](auto zd) {
    visit_dtype(src.dtype, [&](auto zs) {
      with_mode(mode, [&](auto m) {
        cuda::launch(copy_kernel<decltype(zd), decltype(zs), decltype(m)::value>, blocks_for(numel),
                     256, 0, dst, src, numel);
      });
    });
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_fill(const StridedView& dst_in, double value, int64_t numel) {
  if (numel == 0) return;
  const StridedView dst = coalesced(dst_in);
  const int mode = mode_of({&dst}, numel);
  if (mode == kLinear && value == 0.0 && !std::signbit(value)) {  // +0 is all-zero bytes
    DL_CUDA_CHECK(
        cudaMemsetAsync(dst.data, 0, size_t(numel) * dtype_size(dst.dtype), compute_stream()));
    return;
  }
  visit_dtype(dst.dtype, [&](auto zd) {
    with_mode(mode, [&](auto m) {
      cuda::launch(fill_kernel<decltype(zd), decltype(m)::value>, blocks_for(numel), 256, 0, dst,
                   value, numel);
    });
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_add(const StridedView& dst_in, const StridedView& src_in, int64_t numel_in) {
  int64_t numel = numel_in;
  if (numel == 0) return;
  StridedView dst = coalesced(dst_in), src = coalesced(src_in);
  const int mode = mode_of({&dst, &src}, numel);
  const int64_t per = 16 / int64_t(dtype_size(dst.dtype));
  if (mode == kLinear && per > 1 && reinterpret_cast<uintptr_t>(dst.data) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(src.data) % 16 == 0) {
    // Contiguous accumulation (gradient sums) in 16-byte units, the tail element-wise.
    const int64_t units = numel / per;
    visit_dtype(dst.dtype, [&](auto zd) {
      using D = decltype(zd);
      if constexpr (sizeof(D) < 16)
        cuda::launch(add3_units_kernel<D>, blocks_for(units), 256, 0, dst.data, dst.data, src.data,
                     units);
    });
    DL_CUDA_LAUNCH_CHECK();
    const int64_t done = units * per, tail = numel - done;
    if (tail == 0) return;
    const size_t skip = size_t(done) * dtype_size(dst.dtype);
    dst.data = static_cast<char*>(dst.data) + skip;
    src.data = static_cast<char*>(src.data) + skip;
    dst.shape[0] = src.shape[0] = tail;
    numel = tail;
  }
  visit_dtype(dst.dtype, [&](auto zd) {
    with_mode(mode, [&](auto m) {
      cuda::launch(add_kernel<decltype(zd), decltype(m)::value>, blocks_for(numel), 256, 0, dst,
                   src, numel);
    });
  });
  DL_CUDA_LAUNCH_CHECK();
}

void launch_add3(const StridedView& dst, const StridedView& a, const StridedView& b,
                 int64_t units) {
  if (units == 0) return;
  visit_dtype(dst.dtype, [&](auto zd) {
    using D = decltype(zd);
    if constexpr (sizeof(D) < 16)
      cuda::launch(add3_units_kernel<D>, blocks_for(units), 256, 0, dst.data, a.data, b.data,
                   units);
  });
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace driftless::cuda
