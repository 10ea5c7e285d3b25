// See clip.h. CPU bodies here; on cuda the sum of squares is a two-pass fixed-order
// reduction in double and the scaling a kernel (engine/ops/cuda/), so both are
// bitwise reproducible.
#include "engine/optim/clip.h"

#include <cmath>

#include "engine/ops/cuda/elementwise.h"
#include "engine/ops/cuda/reduce.h"

namespace driftless::optim {

namespace {
constexpr const char* kOp = "clip_grad_norm";

void check_grads(const Tensor& g) {
  DL_CHECK(g.defined() && (g.dtype() == DType::f32 || g.dtype() == DType::f64) && g.is_contiguous(),
           kOp,
           "expected contiguous f32 or f64 gradients, got "
               << (g.defined() ? std::string(dtype_name(g.dtype())) + " " + shape_str(g.shape()) +
                                     (g.is_contiguous() ? "" : " (non-contiguous)")
                               : std::string("an undefined tensor")));
#ifndef DRIFTLESS_HAVE_CUDA
  DL_CHECK(g.device() == Device::cpu, kOp,
           "expected gradients on cpu, got cuda (this driftless was built without CUDA)");
#endif
}

// Sum of squares of contiguous cuda x in double, two fixed passes (reduce.cu).
double sum_squares_cuda(const Tensor& x) {
  const int parts = ops::gpu::sum_all_parts(x.numel());
  Tensor scratch = Tensor::empty({parts}, DType::f64, Device::cuda);
  Tensor out = Tensor::empty({}, DType::f64, Device::cuda);
  if (x.numel() == 0) return 0.0;
  ops::gpu::launch_sum_all(x.dtype(), x.raw_data(), x.numel(), true, true, scratch.raw_data(),
                           out.raw_data(), DType::f64, 1.0);
  return out.item();
}
}  // namespace

double grad_norm_squared(const Tensor& grads) {
  check_grads(grads);
  if (grads.device() == Device::cuda) return sum_squares_cuda(grads);
  return visit_dtype(grads.dtype(), [&](auto z) -> double {
    using T = decltype(z);
    if constexpr (std::is_floating_point_v<T>) {
      const T* p = grads.data<T>();
      double sum = 0.0;
      for (int64_t i = 0, n = grads.numel(); i < n; ++i) sum += double(p[i]) * double(p[i]);
      return sum;
    } else {
      return 0.0;  // unreachable: check_grads admits f32 and f64 only
    }
  });
}

double clip_coefficient(double norm, double max_norm) {
  DL_CHECK(max_norm > 0, kOp, "expected max_norm > 0, got " << max_norm);
  if (!std::isfinite(norm)) return 1.0;
  return std::min(1.0, max_norm / (norm + 1e-6));
}

void scale_grads(const Tensor& grads, double factor) {
  check_grads(grads);
  if (grads.device() == Device::cuda)
    return ops::gpu::launch_scale_inplace(grads.dtype(), grads.raw_data(), grads.numel(), factor);
  visit_dtype(grads.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_floating_point_v<T>) {
      T* p = grads.data<T>();
      const T f = T(factor);
      for (int64_t i = 0, n = grads.numel(); i < n; ++i) p[i] *= f;
    }
  });
}

double clip_grad_norm(const std::vector<Tensor>& grads, double max_norm) {
  DL_CHECK(max_norm > 0, kOp, "expected max_norm > 0, got " << max_norm);
  double sq = 0.0;
  for (const Tensor& g : grads) sq += grad_norm_squared(g);
  const double norm = std::sqrt(sq);
  const double c = clip_coefficient(norm, max_norm);
  if (c < 1.0)
    for (const Tensor& g : grads) scale_grads(g, c);
  return norm;
}

double clip_grad_norm(const Tensor& grads, double max_norm) {
  return clip_grad_norm(std::vector<Tensor>{grads}, max_norm);
}

}  // namespace driftless::optim
