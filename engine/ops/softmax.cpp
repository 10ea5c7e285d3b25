// softmax and log_softmax over any dim (max-subtracted, accumulation in double), each one
// node whose backward uses only its own output: softmax dx = y (g - <g, y>), log_softmax
// dx = g - exp(y) sum(g). CUDA bodies in engine/ops/cuda/softmax.cu.
#include "engine/ops/cuda/softmax.h"

#include <cmath>
#include <limits>
#include <vector>

#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

// ---- the CUDA body: host side of the kernels of cuda/softmax.cu ----
namespace gpu {

namespace {

Tensor softmax_forward(const Tensor& x_in, int64_t d, bool log) {
  Tensor x = x_in.contiguous();
  detail::Dims3 s = detail::dims3(x.shape(), d);
  Tensor y = empty_cuda(x.shape(), x.dtype());
  launch_softmax_forward(x.dtype(), x.raw_data(), y.raw_data(), s.outer, s.n, s.inner, log);
  return y;
}

Tensor softmax_backward(const Tensor& g_in, const Tensor& y, int64_t d, bool log) {
  Tensor g = g_in.contiguous();
  detail::Dims3 s = detail::dims3(y.shape(), d);
  Tensor dx = empty_cuda(y.shape(), y.dtype());
  launch_softmax_backward(y.dtype(), g.raw_data(), y.raw_data(), dx.raw_data(), s.outer, s.n,
                          s.inner, log);
  return dx;
}

}  // namespace

}  // namespace gpu

namespace {

// Calls f(base, stride) for each of the outer*inner lines of length n along dim d.
template <class F>
void for_each_line(const detail::Dims3& s, F&& f) {
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) f(o * s.n * s.inner + i, s.inner);
}

Tensor softmax_forward(const char* op, const Tensor& x_in, int64_t d, bool log) {
  if (x_in.device() == Device::cuda) return gpu::softmax_forward(x_in, d, log);
  Tensor x = x_in.contiguous();
  detail::Dims3 s = detail::dims3(x.shape(), d);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  detail::dispatch_float(op, x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for_each_line(s, [&](int64_t base, int64_t st) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < s.n; ++j) m = std::max(m, double(px[base + j * st]));
      double sum = 0;
      for (int64_t j = 0; j < s.n; ++j) sum += std::exp(double(px[base + j * st]) - m);
      const double lse = m + std::log(sum);
      for (int64_t j = 0; j < s.n; ++j) {
        const double v = double(px[base + j * st]) - lse;
        po[base + j * st] = T(log ? v : std::exp(v));
      }
    });
  });
  return out;
}

Tensor softmax_backward(const Tensor& g_in, const Tensor& y, int64_t d, bool log) {
  if (y.device() == Device::cuda) return gpu::softmax_backward(g_in, y, d, log);
  Tensor g = g_in.contiguous();
  detail::Dims3 s = detail::dims3(y.shape(), d);
  Tensor dx = Tensor::empty(y.shape(), y.dtype());
  detail::dispatch_float(log ? "log_softmax" : "softmax", y.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* py = y.data<T>();
    const T* pg = g.data<T>();
    T* pd = dx.data<T>();
    for_each_line(s, [&](int64_t base, int64_t st) {
      double dot = 0;
      for (int64_t j = 0; j < s.n; ++j) {
        const int64_t k = base + j * st;
        dot += log ? double(pg[k]) : double(pg[k]) * double(py[k]);
      }
      for (int64_t j = 0; j < s.n; ++j) {
        const int64_t k = base + j * st;
        pd[k] = log ? T(double(pg[k]) - std::exp(double(py[k])) * dot)
                    : T(double(py[k]) * (double(pg[k]) - dot));
      }
    });
  });
  return dx;
}

Tensor softmax_op(const char* op, const Tensor& x, int64_t dim, bool log) {
  detail::require_float(op, x, "x");
  detail::device_of(op, {x});
  DL_CHECK(x.dim() > 0, op, "needs at least one dim, got a zero-dim tensor");
  const int64_t d = normalize_dim(dim, x.dim(), op);
  Tensor out = softmax_forward(op, x, d, log);
  Context ctx;
  ctx.save_for_backward({out});
  return autograd::record(
      op, {x}, out, std::move(ctx), [d, log](Context& c, const std::vector<Tensor>& g) {
        return std::vector<Tensor>{softmax_backward(g[0], c.saved_tensors()[0], d, log)};
      });
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_op("softmax", x, dim, false);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_op("log_softmax", x, dim, true);
}

}  // namespace driftless::ops
