// Merging attention results computed over disjoint key sets of the same query rows (ring
// context parallelism, routes/ring_route.h): with out_i and lse_i of each part,
// lse = log Σ exp(lse_i) and out = Σ exp(lse_i − lse) · out_i. Rows that see no key in a
// part have lse −inf there and weight 0; a row that sees none at all keeps out 0, lse −inf.
#pragma once
#include "engine/core/tensor.h"

namespace driftless::layers {

// acc_out (n, H, D) f32 and acc_lse (H, n) f32, contiguous, on the parts' device: the
// running merge. part_out (n', H, D) of any floating dtype and part_lse (H, n') f32, with
// n' <= n, are merged into acc rows [0, n'). Each row is merged by one thread in a fixed
// order: the same inputs give the same bits.
void lse_merge(const Tensor& acc_out, const Tensor& acc_lse, const Tensor& part_out,
               const Tensor& part_lse);

namespace detail {
// The CUDA body (cuda/lse_merge.cu); throws in a build without CUDA. lse_stride: elements
// between heads of acc_lse (n) and of part_lse (n').
void cuda_lse_merge(float* acc_out, float* acc_lse, int64_t acc_lse_stride, const void* part_out,
                    DType part_dtype, const float* part_lse, int64_t part_lse_stride, int64_t rows,
                    int64_t heads, int64_t head_dim);
}  // namespace detail

}  // namespace driftless::layers
