// LSE merge of attention parts (lse_merge.h): argument checks, the CPU body, and the CUDA
// stub of a build without CUDA.
#include "layers/attention/lse_merge.h"

#include <cmath>
#include <limits>

#include "engine/core/error.h"

namespace driftless::layers {

namespace {
constexpr const char* kOp = "lse_merge";

// Weights of the running value (a) and the part (b); false when neither sees a key.
inline bool merge_weights(float la, float lb, float* wa, float* wb, float* lse) {
  const float m = std::max(la, lb);
  if (m == -std::numeric_limits<float>::infinity()) return false;
  *wa = std::exp(la - m);
  *wb = std::exp(lb - m);
  const float s = *wa + *wb;
  *wa /= s;
  *wb /= s;
  *lse = m + std::log(s);
  return true;
}
}  // namespace

void lse_merge(const Tensor& acc_out, const Tensor& acc_lse, const Tensor& part_out,
               const Tensor& part_lse) {
  DL_CHECK(acc_out.defined() && acc_out.dim() == 3 && acc_out.dtype() == DType::f32 &&
               acc_out.is_contiguous(),
           kOp, "acc_out must be a contiguous f32 (n, H, D) tensor");
  const int64_t n = acc_out.size(0), H = acc_out.size(1), D = acc_out.size(2);
  DL_CHECK(acc_lse.defined() && acc_lse.dtype() == DType::f32 && acc_lse.is_contiguous() &&
               acc_lse.shape() == Shape({H, n}),
           kOp, "acc_lse must be a contiguous f32 (" << H << ", " << n << ") tensor");
  DL_CHECK(part_out.defined() && part_out.dim() == 3 && part_out.size(0) <= n &&
               part_out.size(1) == H && part_out.size(2) == D,
           kOp,
           "part_out must be (n' <= "
               << n << ", " << H << ", " << D << "), got "
               << (part_out.defined() ? shape_str(part_out.shape()) : "undefined"));
  const int64_t rows = part_out.size(0);
  DL_CHECK(
      part_lse.defined() && part_lse.dtype() == DType::f32 && part_lse.shape() == Shape({H, rows}),
      kOp, "part_lse must be f32 (" << H << ", " << rows << ")");
  DL_CHECK(acc_out.device() == part_out.device() && acc_lse.device() == part_out.device() &&
               part_lse.device() == part_out.device(),
           kOp, "all tensors must be on one device");
  if (rows == 0) return;
  Tensor po = part_out.contiguous(), pl = part_lse.contiguous();
  if (acc_out.device() == Device::cuda) {
    detail::cuda_lse_merge(acc_out.data<float>(), acc_lse.data<float>(), n, po.raw_data(),
                           po.dtype(), pl.data<float>(), rows, rows, H, D);
    return;
  }
  Tensor pf = po.to(DType::f32).contiguous();
  const float* p = pf.data<float>();
  const float* lp = pl.data<float>();
  float* a = acc_out.data<float>();
  float* la = acc_lse.data<float>();
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t h = 0; h < H; ++h) {
      float wa, wb, lse;
      if (!merge_weights(la[h * n + t], lp[h * rows + t], &wa, &wb, &lse)) continue;
      float* o = a + (t * H + h) * D;
      const float* q = p + (t * H + h) * D;
      for (int64_t d = 0; d < D; ++d) o[d] = wa * o[d] + wb * q[d];
      la[h * n + t] = lse;
    }
}

#ifndef DRIFTLESS_HAVE_CUDA
void detail::cuda_lse_merge(float*, float*, int64_t, const void*, DType, const float*, int64_t,
                            int64_t, int64_t, int64_t) {
  DL_FAIL(kOp, "no CUDA backend: this driftless was built without CUDA");
}
#endif

}  // namespace driftless::layers
