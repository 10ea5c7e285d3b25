// The offset of a row-major element under a (shape, strides) pair of kMaxDims arrays: the
// one indexing routine of the strided kernels (core copy/fill/add, the ops' elementwise
// and reduction kernels). Included by .cu files only.
//
// The loop is unrolled over kMaxDims with a rank guard, so the arrays (kernel parameters)
// are read in place. Indexing them with a runtime dim made every thread copy them into
// local memory first, which made those kernels slow (BENCHMARKS.md). I is the index type:
// int32 where every offset fits (64-bit division is emulated and many times slower).
#pragma once
#include <cstdint>

#include "engine/core/cuda/elementwise.cuh"  // kMaxDims

namespace driftless::cuda {

template <class I>
__device__ __forceinline__ I strided_offset(int rank, const int64_t (&shape)[kMaxDims],
                                            const int64_t (&strides)[kMaxDims], I linear) {
  I off = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d > 0; --d) {
    if (d < rank) {
      const I s = I(shape[d]);
      off += (linear % s) * I(strides[d]);
      linear /= s;
    }
  }
  return rank > 0 ? off + linear * I(strides[0]) : off;
}

}  // namespace driftless::cuda
