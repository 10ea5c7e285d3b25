// Llama's RMSNorm over the last dim as one node with a hand-written fused backward, modelled
// on layer_norm (norm.cpp): forward saves the per-row reciprocal rms, backward makes dx and
// dweight in one pass over the rows. CUDA bodies in engine/ops/cuda/rms_norm.cu.
#include "engine/ops/cuda/rms_norm.h"

#include <cmath>
#include <vector>

#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

// ---- the CUDA body: host side of the kernels of cuda/rms_norm.cu ----
namespace gpu {

namespace {

std::vector<Tensor> rms_norm_forward(const Tensor& x, const Tensor& w, double eps) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  Tensor out = empty_cuda(x.shape(), x.dtype());
  Tensor rstd = empty_cuda({rows}, acc_dtype(x.dtype()));
  launch_rms_norm_forward(x.dtype(), x.raw_data(), w.raw_data(), out.raw_data(), rstd.raw_data(),
                          rows, c, eps);
  return {out, rstd};
}

std::vector<Tensor> rms_norm_backward(const Tensor& g_in, const Tensor& x, const Tensor& w,
                                      const Tensor& rstd, bool want_w, const Tensor& dw_into,
                                      const Tensor& dx_add) {
  Tensor g = g_in.contiguous();
  check_dx_add("rms_norm", dx_add, x);
  const int64_t c = x.size(-1), rows = c == 0 ? 0 : x.numel() / c;
  Tensor dx = empty_cuda(x.shape(), x.dtype());
  const bool into = want_w && dw_into.defined() && acc_dtype(x.dtype()) == DType::f32;
  DL_CHECK(!into || (dw_into.dtype() == DType::f32 && dw_into.is_contiguous() &&
                     dw_into.shape() == Shape({c})),
           "rms_norm", "the weight gradient accumulates into contiguous f32 (" << c << ")");
  Tensor dw = want_w ? (into ? dw_into : empty_cuda({c}, x.dtype())) : Tensor();
  Tensor scratch;
  if (want_w) {
    scratch = empty_cuda({std::max<int64_t>(rms_norm_chunks(rows) * c, 1)}, acc_dtype(x.dtype()));
    if (rows == 0 && !into) dw.zero_();
  }
  launch_rms_norm_backward(x.dtype(), g.raw_data(), x.raw_data(), w.raw_data(), rstd.raw_data(),
                           dx_add.defined() ? dx_add.raw_data() : nullptr, dx.raw_data(),
                           dw.defined() ? dw.raw_data() : nullptr,
                           scratch.defined() ? scratch.raw_data() : nullptr, rows, c, into);
  if (into) return {dx, Tensor()};
  return {dx, dw};
}

}  // namespace

}  // namespace gpu

namespace {

// x (R, C) contiguous, weight (C), rstd (R). Returns {dx, dweight}. On cuda the weight
// gradient goes straight into the leaf's f32 gradient storage when it has one
// (autograd::accumulating_grad; returned undefined then), and the gradient of the op's input
// already summed by other consumers (the residual stream's, autograd::take_pending_grad) is
// added to dx in the same kernel, as layer_norm does.
std::vector<Tensor> rms_norm_backward(const Tensor& g_in, const Tensor& x_in, const Tensor& weight,
                                      const Tensor& rstd, bool want_w, const Tensor& weight_leaf,
                                      const Tensor& x_op) {
  if (x_in.device() == Device::cuda) {
    const Tensor dw_into = want_w ? autograd::accumulating_grad(weight_leaf) : Tensor();
    std::vector<Tensor> r = gpu::rms_norm_backward(g_in, x_in, weight, rstd, want_w, dw_into,
                                                   autograd::take_pending_grad(x_op));
    r[0] = r[0].reshape(x_in.shape());
    return r;
  }
  Tensor g = g_in.contiguous(), x = x_in.contiguous();
  const int64_t c = x.size(-1), rows = c == 0 ? 0 : x.numel() / c;
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  Tensor dw;
  detail::dispatch_float("rms_norm", x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    const T* pg = g.data<T>();
    const T* pw = weight.data<T>();
    const T* pr = rstd.data<T>();
    T* pd = dx.data<T>();
    std::vector<double> acc_w(size_t(c), 0.0);
    // y = xhat * w with xhat = x * r, r = (mean(x^2) + eps)^-1/2, dr/dx_j = -r^3 x_j / C:
    // dx = r * (d - xhat * mean(d * xhat)) with d = g * w.
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = px + r * c;
      const T* gr = pg + r * c;
      const double s = double(pr[r]);
      double mean_dx = 0;
      for (int64_t i = 0; i < c; ++i) {
        const double xhat = double(xr[i]) * s;
        mean_dx += double(gr[i]) * double(pw[i]) * xhat;
        acc_w[size_t(i)] += double(gr[i]) * xhat;
      }
      mean_dx /= double(c);
      for (int64_t i = 0; i < c; ++i) {
        const double xhat = double(xr[i]) * s;
        pd[r * c + i] = T(s * (double(gr[i]) * double(pw[i]) - xhat * mean_dx));
      }
    }
    if (want_w) {
      dw = Tensor::empty({c}, x.dtype());
      for (int64_t i = 0; i < c; ++i) dw.data<T>()[i] = T(acc_w[size_t(i)]);
    }
  });
  return {dx.reshape(x_in.shape()), dw};
}

}  // namespace

Tensor rms_norm(const Tensor& x_in, const Tensor& weight_in, double eps) {
  const char* op = "rms_norm";
  detail::require_float(op, x_in, "x");
  detail::require_defined(op, weight_in, "weight");
  DL_CHECK(x_in.dim() >= 1, op, "x must have at least one dim, got a zero-dim tensor");
  const int64_t c = x_in.size(-1);
  detail::require_same_dtype(op, x_in, "x", weight_in, "weight");
  DL_CHECK(weight_in.shape() == Shape{c}, op,
           "weight must have shape [" << c << "] for x " << shape_str(x_in.shape()) << ", got "
                                      << shape_str(weight_in.shape()));
  DL_CHECK(eps >= 0, op, "eps must be >= 0, got " << eps);
  const Device dev = detail::device_of(op, {x_in, weight_in});
  DL_CHECK(c > 0, op, "last dim of x " << shape_str(x_in.shape()) << " is empty");
  Tensor x = x_in.contiguous();
  Tensor w = weight_in.contiguous();
  const int64_t rows = x.numel() / c;
  Tensor out, rstd;
  if (dev == Device::cuda) {
    std::vector<Tensor> r = gpu::rms_norm_forward(x, w, eps);
    out = r[0], rstd = r[1];
  } else {
    out = Tensor::empty(x.shape(), x.dtype());
    rstd = Tensor::empty({rows}, x.dtype());
    detail::dispatch_float(op, x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* px = x.data<T>();
      const T* pw = w.data<T>();
      T* po = out.data<T>();
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = px + r * c;
        double ms = 0;  // the mean of squares in double: "f32 or better"
        for (int64_t i = 0; i < c; ++i) ms += double(xr[i]) * double(xr[i]);
        const T s = T(1.0 / std::sqrt(ms / double(c) + eps));
        rstd.data<T>()[r] = s;
        // As HF: the normalised row is rounded to x's dtype before the weight multiplies it.
        for (int64_t i = 0; i < c; ++i) po[r * c + i] = T(xr[i] * s) * pw[i];
      }
    });
  }
  Context ctx;
  ctx.save_for_backward({x, w, rstd});
  const bool want_w = weight_in.requires_grad();
  return autograd::record(op, {x_in, weight_in}, out, std::move(ctx),
                          [want_w, weight_in, x_in](Context& ctx, const std::vector<Tensor>& g) {
                            const auto& s = ctx.saved_tensors();
                            return rms_norm_backward(g[0], s[0], s[1], s[2], want_w, weight_in,
                                                     x_in);
                          });
}

}  // namespace driftless::ops
