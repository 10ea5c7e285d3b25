// GELU with the tanh approximation used by GPT-2, with a hand-written backward
// (the derivative of the same approximation, not of the exact erf form). CUDA bodies in
// engine/ops/cuda/elementwise.cu.
#include <cmath>
#include <vector>

#include "engine/ops/cuda/backend.h"
#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

// ---- the CUDA body: host side of the kernels of cuda/elementwise.cu ----
namespace gpu {

Tensor gelu_backward(const Tensor& g, const Tensor& x) {
  Tensor out = empty_cuda(x.shape(), x.dtype());
  auto [sg, dg] = read_strides(g, x.shape());
  auto [sx, dx] = read_strides(x, x.shape());
  launch_binary(BinaryKind::gelu_backward, x.dtype(), layout_of("gelu", x.shape()), dg && dx,
                g.raw_data(), sg, x.raw_data(), sx, out.raw_data(), out.numel());
  return out;
}

}  // namespace gpu

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCoeff = 0.044715;

// dx = g * gelu'(x); x and g have the same shape.
Tensor gelu_backward(const Tensor& g_in, const Tensor& x_in) {
  if (x_in.device() == Device::cuda) return gpu::gelu_backward(g_in, x_in);
  Tensor g = g_in.contiguous(), x = x_in.contiguous();
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  detail::dispatch_float("gelu", x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = x.data<T>();
    const T* pg = g.data<T>();
    T* pd = dx.data<T>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) {
      const T v = px[i];
      const T u = T(kSqrt2OverPi) * (v + T(kGeluCoeff) * v * v * v);
      const T t = std::tanh(u);
      const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCoeff) * v * v);
      pd[i] = pg[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
    }
  });
  return dx;
}

}  // namespace

Tensor gelu(const Tensor& x_in) {
  const char* op = "gelu";
  detail::require_float(op, x_in, "x");
  const Device dev = detail::device_of(op, {x_in});
  Tensor x = x_in.contiguous();
  Tensor out;
  if (dev == Device::cuda)
    out = gpu::unary(gpu::Unary::gelu, x, x.shape());
  else
    out = Tensor::empty(x.shape(), x.dtype());
  if (dev == Device::cpu)
    detail::dispatch_float(op, x.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* px = x.data<T>();
      T* po = out.data<T>();
      for (int64_t i = 0, n = x.numel(); i < n; ++i) {
        const T v = px[i];
        po[i] = T(0.5) * v * (T(1) + std::tanh(T(kSqrt2OverPi) * (v + T(kGeluCoeff) * v * v * v)));
      }
    });
  Context ctx;
  ctx.save_for_backward({x_in});
  return autograd::record(op, {x_in}, out, std::move(ctx),
                          [](Context& c, const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{gelu_backward(g[0], c.saved_tensors()[0])};
                          });
}

}  // namespace driftless::ops
