// Strided elementwise kernels behind Tensor::copy_/fill_/add_ on cuda tensors. A
// StridedView carries up to kMaxDims dims by value so kernels index any view directly.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"

namespace driftless::cuda {

constexpr int kMaxDims = 8;

struct StridedView {
  void* data;
  DType dtype;
  int rank;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
};

// dst[i] = convert(src[i]) over numel elements in row-major order.
void launch_copy(const StridedView& dst, const StridedView& src, int64_t numel);
void launch_fill(const StridedView& dst, double value, int64_t numel);
// dst[i] += src[i] (same dtype).
void launch_add(const StridedView& dst, const StridedView& src, int64_t numel);
// dst[i] = a[i] + b[i] over `units` 16-byte units of three linear, aligned runs of one dtype
// (the same per-element arithmetic as launch_add).
void launch_add3(const StridedView& dst, const StridedView& a, const StridedView& b,
                 int64_t units);

}  // namespace driftless::cuda
