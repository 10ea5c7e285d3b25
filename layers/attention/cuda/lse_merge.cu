// CUDA body of the LSE merge (lse_merge.h): one thread per (row, head) walks the head's D
// values, so each output element is computed once, in the CPU body's order of operations.
#include <math.h>

#include "engine/core/cuda/launch.cuh"
#include "engine/ops/cuda/common.cuh"
#include "layers/attention/lse_merge.h"

namespace driftless::layers {
namespace {

template <class Tin>
__global__ void lse_merge_kernel(float* acc_out, float* acc_lse, int64_t acc_stride,
                                 const Tin* part_out, const float* part_lse, int64_t part_stride,
                                 int64_t rows, int64_t heads, int64_t head_dim) {
  cuda::dependent_kernel_begin();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * heads) return;
  const int64_t t = i / heads, h = i % heads;
  const float la = acc_lse[h * acc_stride + t], lb = part_lse[h * part_stride + t];
  const float m = fmaxf(la, lb);
  if (m == -INFINITY) return;
  float wa = expf(la - m), wb = expf(lb - m);
  const float s = wa + wb;
  wa /= s;
  wb /= s;
  float* o = acc_out + i * head_dim;
  const Tin* p = part_out + i * head_dim;
  for (int64_t d = 0; d < head_dim; ++d) o[d] = wa * o[d] + wb * ops::gpu::to_acc(p[d]);
  acc_lse[h * acc_stride + t] = m + logf(s);
}

}  // namespace

void detail::cuda_lse_merge(float* acc_out, float* acc_lse, int64_t acc_lse_stride,
                            const void* part_out, DType part_dtype, const float* part_lse,
                            int64_t part_lse_stride, int64_t rows, int64_t heads,
                            int64_t head_dim) {
  const int64_t n = rows * heads;
  const int threads = 128;
  const dim3 grid(unsigned((n + threads - 1) / threads));
  if (part_dtype == DType::bf16) {
    cuda::launch(lse_merge_kernel<ops::gpu::bf16_t>, grid, dim3(threads), 0, acc_out, acc_lse,
                 acc_lse_stride, static_cast<const ops::gpu::bf16_t*>(part_out), part_lse,
                 part_lse_stride, rows, heads, head_dim);
  } else {
    DL_CHECK(part_dtype == DType::f32, "lse_merge",
             "part_out must be f32 or bf16 on cuda, got " << dtype_name(part_dtype));
    cuda::launch(lse_merge_kernel<float>, grid, dim3(threads), 0, acc_out, acc_lse, acc_lse_stride,
                 static_cast<const float*>(part_out), part_lse, part_lse_stride, rows, heads,
                 head_dim);
  }
}

}  // namespace driftless::layers
