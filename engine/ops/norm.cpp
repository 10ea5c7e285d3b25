// Layer norm over the last dim as one node with a hand-written fused backward (llm.c
// style): forward saves the per-row mean and reciprocal std, backward makes dx, dweight
// and dbias in one pass over the rows. CUDA bodies in engine/ops/cuda/norm.cu (mean and
// rstd saved in fp32 there, f64 for f64).
#include "engine/ops/cuda/norm.h"

#include <cmath>
#include <vector>

#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

// ---- the CUDA body: host side of the kernels of cuda/norm.cu ----
namespace gpu {

namespace {

std::vector<Tensor> layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                       double eps) {
  const int64_t c = x.size(-1), rows = x.numel() / c;
  Tensor out = empty_cuda(x.shape(), x.dtype());
  Tensor mean = empty_cuda({rows}, acc_dtype(x.dtype()));
  Tensor rstd = empty_cuda({rows}, acc_dtype(x.dtype()));
  launch_layer_norm_forward(x.dtype(), x.raw_data(), w.defined() ? w.raw_data() : nullptr,
                            b.defined() ? b.raw_data() : nullptr, out.raw_data(), mean.raw_data(),
                            rstd.raw_data(), rows, c, eps);
  return {out, mean, rstd};
}

std::vector<Tensor> layer_norm_backward(const Tensor& g_in, const Tensor& x, const Tensor& w,
                                        const Tensor& mean, const Tensor& rstd, bool want_w,
                                        bool want_b, const Tensor& dw_into, const Tensor& db_into,
                                        const Tensor& dx_add) {
  Tensor g = g_in.contiguous();
  check_dx_add("layer_norm", dx_add, x);
  const int64_t c = x.size(-1), rows = c == 0 ? 0 : x.numel() / c;
  Tensor dx = empty_cuda(x.shape(), x.dtype());
  // Accumulate into the given f32 storage only when every wanted gradient has some.
  const bool into = acc_dtype(x.dtype()) == DType::f32 && (want_w || want_b) &&
                    (!want_w || dw_into.defined()) && (!want_b || db_into.defined());
  for (const Tensor* t : {&dw_into, &db_into})
    DL_CHECK(!into || !t->defined() ||
                 (t->dtype() == DType::f32 && t->is_contiguous() && t->shape() == Shape({c})),
             "layer_norm", "gradients accumulate into contiguous f32 (" << c << ")");
  Tensor dw = want_w ? (into ? dw_into : empty_cuda({c}, x.dtype())) : Tensor();
  Tensor db = want_b ? (into ? db_into : empty_cuda({c}, x.dtype())) : Tensor();
  const int64_t chunks = layer_norm_chunks(rows);
  Tensor scratch;
  if (want_w || want_b)
    scratch = empty_cuda({std::max<int64_t>(2 * chunks * c, 1)}, acc_dtype(x.dtype()));
  if (rows == 0 && !into) {
    if (dw.defined()) dw.zero_();
    if (db.defined()) db.zero_();
  }
  launch_layer_norm_backward(
      x.dtype(), g.raw_data(), x.raw_data(), w.defined() ? w.raw_data() : nullptr, mean.raw_data(),
      rstd.raw_data(), dx_add.defined() ? dx_add.raw_data() : nullptr, dx.raw_data(),
      dw.defined() ? dw.raw_data() : nullptr, db.defined() ? db.raw_data() : nullptr,
      scratch.defined() ? scratch.raw_data() : nullptr, rows, c, into);
  if (into) return {dx, Tensor(), Tensor()};
  return {dx, dw, db};
}

}  // namespace

}  // namespace gpu

namespace {

// x (R, C) contiguous; weight (C) or undefined. Returns {dx, dweight, dbias}. On cuda the
// weight and bias gradients go straight into the leaves' f32 gradient storage when both
// have it (autograd::accumulating_grad; returned undefined then), and the gradient of the
// op's input x_op already summed by other consumers (the residual stream's, taken with
// autograd::take_pending_grad) is added to dx in the same kernel.
std::vector<Tensor> layer_norm_backward(const Tensor& g_in, const Tensor& x_in,
                                        const Tensor& weight_in, const Tensor& mean,
                                        const Tensor& rstd, bool want_w, bool want_b,
                                        const Tensor& weight_leaf, const Tensor& bias_leaf,
                                        const Tensor& x_op) {
  if (x_in.device() == Device::cuda) {
    const Tensor dw_into = want_w ? autograd::accumulating_grad(weight_leaf) : Tensor();
    const Tensor db_into = want_b ? autograd::accumulating_grad(bias_leaf) : Tensor();
    std::vector<Tensor> r =
        gpu::layer_norm_backward(g_in, x_in, weight_in, mean, rstd, want_w, want_b, dw_into,
                                 db_into, autograd::take_pending_grad(x_op));
    r[0] = r[0].reshape(x_in.shape());
    return r;
  }
  Tensor g = g_in.contiguous(), x = x_in.contiguous();
  Tensor weight = weight_in.defined() ? weight_in.contiguous() : Tensor();
  const int64_t c = x.size(-1), rows = c == 0 ? 0 : x.numel() / c;
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  Tensor dw, db;
  detail::dispatch_float("layer_norm", x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    const T* pg = g.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pm = mean.data<T>();
    const T* pr = rstd.data<T>();
    T* pd = dx.data<T>();
    std::vector<double> acc_w(size_t(c), 0.0), acc_b(size_t(c), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = px + r * c;
      const T* gr = pg + r * c;
      const double m = double(pm[r]), s = double(pr[r]);
      double mean_d = 0, mean_dx = 0;  // mean(dxhat), mean(dxhat * xhat)
      for (int64_t i = 0; i < c; ++i) {
        const double xhat = (double(xr[i]) - m) * s;
        const double d = double(gr[i]) * (pw ? double(pw[i]) : 1.0);
        mean_d += d;
        mean_dx += d * xhat;
        acc_w[size_t(i)] += double(gr[i]) * xhat;
        acc_b[size_t(i)] += double(gr[i]);
      }
      mean_d /= double(c);
      mean_dx /= double(c);
      for (int64_t i = 0; i < c; ++i) {
        const double xhat = (double(xr[i]) - m) * s;
        const double d = double(gr[i]) * (pw ? double(pw[i]) : 1.0);
        pd[r * c + i] = T(s * (d - mean_d - xhat * mean_dx));
      }
    }
    if (want_w) {
      dw = Tensor::empty({c}, x.dtype());
      for (int64_t i = 0; i < c; ++i) dw.data<T>()[i] = T(acc_w[size_t(i)]);
    }
    if (want_b) {
      db = Tensor::empty({c}, x.dtype());
      for (int64_t i = 0; i < c; ++i) db.data<T>()[i] = T(acc_b[size_t(i)]);
    }
  });
  return {dx.reshape(x_in.shape()), dw, db};
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  const char* op = "layer_norm";
  detail::require_float(op, x_in, "x");
  DL_CHECK(x_in.dim() >= 1, op, "x must have at least one dim, got a zero-dim tensor");
  const int64_t c = x_in.size(-1);
  for (auto [t, name] : {std::pair{weight_in, "weight"}, std::pair{bias_in, "bias"}}) {
    if (!t.defined()) continue;
    detail::require_same_dtype(op, x_in, "x", t, name);
    DL_CHECK(t.shape() == Shape{c}, op,
             name << " must have shape [" << c << "] for x " << shape_str(x_in.shape()) << ", got "
                  << shape_str(t.shape()));
  }
  DL_CHECK(eps >= 0, op, "eps must be >= 0, got " << eps);
  const Device dev = detail::device_of(op, {x_in, weight_in, bias_in});
  DL_CHECK(c > 0, op, "last dim of x " << shape_str(x_in.shape()) << " is empty");
  Tensor x = x_in.contiguous();
  Tensor w = weight_in.defined() ? weight_in.contiguous() : Tensor();
  Tensor b = bias_in.defined() ? bias_in.contiguous() : Tensor();
  const int64_t rows = x.numel() / c;
  Tensor out, mean, rstd;
  if (dev == Device::cuda) {
    std::vector<Tensor> r = gpu::layer_norm_forward(x, w, b, eps);
    out = r[0], mean = r[1], rstd = r[2];
  } else {
    out = Tensor::empty(x.shape(), x.dtype());
    mean = Tensor::empty({rows}, x.dtype());
    rstd = Tensor::empty({rows}, x.dtype());
  }
  if (dev == Device::cpu)
    detail::dispatch_float(op, x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* px = x.data<T>();
      const T* pw = w.defined() ? w.data<T>() : nullptr;
      const T* pb = b.defined() ? b.data<T>() : nullptr;
      T* po = out.data<T>();
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = px + r * c;
        double m = 0, v = 0;
        for (int64_t i = 0; i < c; ++i) m += double(xr[i]);
        m /= double(c);
        for (int64_t i = 0; i < c; ++i) v += (double(xr[i]) - m) * (double(xr[i]) - m);
        v /= double(c);
        const double s = 1.0 / std::sqrt(v + eps);
        mean.data<T>()[r] = T(m);
        rstd.data<T>()[r] = T(s);
        for (int64_t i = 0; i < c; ++i) {
          double y = (double(xr[i]) - m) * s;
          if (pw) y *= double(pw[i]);
          if (pb) y += double(pb[i]);
          po[r * c + i] = T(y);
        }
      }
    });
  Context ctx;
  ctx.save_for_backward({x, w, mean, rstd});
  const bool want_w = weight_in.defined(), want_b = bias_in.defined();
  return autograd::record(op, {x_in, weight_in, bias_in}, out, std::move(ctx),
                          [want_w, want_b, weight_in, bias_in, x_in](
                              Context& ctx, const std::vector<Tensor>& g) {
                            const auto& s = ctx.saved_tensors();
                            return layer_norm_backward(g[0], s[0], s[1], s[2], s[3], want_w,
                                                       want_b, weight_in, bias_in, x_in);
                          });
}

}  // namespace driftless::ops
