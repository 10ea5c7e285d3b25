// Device helpers shared by the generic ops' kernels: the accumulation type (f32 for f32
// and bf16 storage, f64 for f64), conversions, the dtype switch, broadcast offsets and
// fixed-order warp/block reductions (no atomics: the same inputs give the same bits).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/strided_offset.cuh"
#include "engine/ops/cuda/elementwise.h"  // Layout, Strides

namespace driftless::ops::gpu {

using bf16_t = __nv_bfloat16;

template <class T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};
template <class T>
using acc_t = typename AccOf<T>::type;

__device__ __forceinline__ float to_acc(float v) {
  return v;
}
__device__ __forceinline__ double to_acc(double v) {
  return v;
}
__device__ __forceinline__ float to_acc(bf16_t v) {
  return __bfloat162float(v);
}

// Rounds an accumulator (or a double) to the storage type; bf16 goes through float like
// the host conversion (dtype.h).
template <class T, class A>
__device__ __forceinline__ T from_acc(A v) {
  if constexpr (std::is_same_v<T, bf16_t>) {
    return __float2bfloat16_rn(float(v));
  } else {
    return T(v);
  }
}

// Two floats rounded to bf16 (as from_acc) and packed, lo in the low half: one 4-byte store.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

// A 16-byte unit of V = 16 / sizeof(T) elements of T as floats (to_acc) and back (from_acc):
// the loads and stores of the vectorised kernels (norm.cu, rms_norm.cu, swiglu.cu, rope.cu).
template <class T>
struct Pack {
  static constexpr int V = 16 / int(sizeof(T));
  __device__ __forceinline__ static void unpack(const uint4& raw, float (&v)[V]) {
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = to_acc(e[j]);
  }
  __device__ __forceinline__ static void load(const T* p, float (&v)[V]) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);  // one 16-byte load: unpack given
    unpack(raw, v);  // the dereference itself would read the elements one by one
  }
  __device__ __forceinline__ static uint4 pack(const float (&v)[V]) {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < V; ++j) e[j] = from_acc<T>(v[j]);
    return raw;
  }
  __device__ __forceinline__ static void store(T* p, const float (&v)[V]) {
    *reinterpret_cast<uint4*>(p) = pack(v);
  }
};
using Bf16Pack = Pack<bf16_t>;  // 8 bf16 a unit

// True when every pointer is 16-byte aligned (what the 16-byte unit kernels load through).
inline bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Calls f(T{}) with T = float, double or __nv_bfloat16 for the storage dtype.
template <class F>
void dispatch_float(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::f64:
      return f(double{});
    case DType::bf16:
      return f(bf16_t{});
    default:
      DL_FAIL(op, "no cuda kernel for dtype " << dtype_name(dtype));
  }
}

inline unsigned grid_for(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535 * 32) b = 65535 * 32;
  return unsigned(b);
}

// Offset of row-major element `linear` of shape `layout` under `strides` (I: int32 where
// every offset fits; see strided_offset.cuh).
template <class I = int64_t>
__device__ __forceinline__ I offset_of(const Layout& layout, const Strides& st, I linear) {
  return ::driftless::cuda::strided_offset<I>(layout.rank, layout.shape, st.v, linear);
}

// How a kernel indexes its operands: all dense (offset = i), or through offset_of in
// 32- or 64-bit arithmetic.
enum IndexMode : int { kDense = 0, kIndex32 = 1, kIndex64 = 2 };

template <int M>
__device__ __forceinline__ int64_t operand_offset(const Layout& layout, const Strides& st,
                                                  int64_t i) {
  if constexpr (M == kDense) {
    return i;
  } else if constexpr (M == kIndex32) {
    return offset_of<int32_t>(layout, st, int32_t(i));
  } else {
    return offset_of<int64_t>(layout, st, i);
  }
}

// The mode for n elements of `layout` read through the given strides.
inline int index_mode(bool dense, const Layout& layout, std::initializer_list<const Strides*> st,
                      int64_t n) {
  if (dense) return kDense;
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  if (n > kMax) return kIndex64;
  for (const Strides* s : st) {
    int64_t reach = 0;
    for (int d = 0; d < layout.rank; ++d) {
      if (s->v[d] < 0) return kIndex64;
      reach += (layout.shape[d] - 1) * s->v[d];
    }
    if (reach > kMax) return kIndex64;
  }
  return kIndex32;
}

template <class F>
void with_index_mode(int mode, F&& f) {
  if (mode == kDense) return f(std::integral_constant<int, kDense>{});
  if (mode == kIndex32) return f(std::integral_constant<int, kIndex32>{});
  f(std::integral_constant<int, kIndex64>{});
}

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class A>
__device__ __forceinline__ A warp_max(A v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every
// thread. The tree is fixed by blockDim, so the result does not depend on scheduling.
template <class A>
__device__ A block_sum(A v) {
  __shared__ A shared[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : A(0);
  return warp_sum(v);
}
template <class A>
__device__ A block_max(A v) {
  __shared__ A shared[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : A(-INFINITY);
  return warp_max(v);
}

// Column sums of a (rows, cols) row-major matrix of partial sums (pass 2 of the chunked
// reductions): a block of kColSumThreads covers 32 columns; its kColSumLanes thread rows each
// sum every kColSumLanes-th row in order, then the lanes are added in a fixed tree, so the
// result is deterministic. Many short columns stay parallel: one thread per column and a
// serial walk over hundreds of rows had 3 blocks for GPT's 768 columns; 32 thread rows
// rather than 8 cut the walk of a layer norm's 512 chunk partials (one per 32 rows of a
// 16k-token batch) to 16 loads a thread.
constexpr int kColSumLanes = 32, kColSumThreads = 32 * kColSumLanes;
inline unsigned col_sum_blocks(int64_t cols) {
  return unsigned((cols + 31) / 32);
}
// out[c] = f(sum_r parts[r * cols + c]) for each output column; launch with
// col_sum_blocks(cols) blocks of kColSumThreads.
template <class A, class F>
__device__ void col_sums(const A* parts, int64_t rows, int64_t cols, F&& f) {
  __shared__ A part[kColSumLanes][32];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t c = blockIdx.x * int64_t(32) + tx;
  A acc = 0;
  if (c < cols)
    for (int64_t r = ty; r < rows; r += kColSumLanes) acc += parts[r * cols + c];
  __syncthreads();  // part may still be read by a previous call
  part[ty][tx] = acc;
  __syncthreads();
#pragma unroll
  for (int half = kColSumLanes / 2; half > 0; half /= 2) {
    if (ty < half) part[ty][tx] += part[ty + half][tx];
    __syncthreads();
  }
  if (ty == 0 && c < cols) f(c, part[0][tx]);
}

}  // namespace driftless::ops::gpu
