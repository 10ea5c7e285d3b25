// SwiGLU of a fused gate/up projection, silu(gate) * up, as one node: the Llama MLP's
// activation without materialising silu(gate) or splitting the projection's output. CUDA
// bodies in engine/ops/cuda/swiglu.cu (one elementwise kernel each way).
#include "engine/ops/cuda/swiglu.h"

#include <cmath>
#include <vector>

#include "engine/ops/op_utils.h"
#include "engine/ops/ops.h"

namespace driftless::ops {

using autograd::Context;

// ---- the CUDA body: host side of the kernels of cuda/swiglu.cu ----
namespace gpu {

namespace {

Tensor swiglu_forward(const Tensor& gate_up) {
  const int64_t two_f = gate_up.size(-1), rows = two_f == 0 ? 0 : gate_up.numel() / two_f;
  Shape shape = gate_up.shape();
  shape.back() = two_f / 2;
  Tensor out = empty_cuda(shape, gate_up.dtype());
  launch_swiglu_forward(gate_up.dtype(), gate_up.raw_data(), out.raw_data(), rows, two_f / 2);
  return out;
}

Tensor swiglu_backward(const Tensor& g_in, const Tensor& gate_up) {
  Tensor g = g_in.contiguous();
  const int64_t two_f = gate_up.size(-1), rows = two_f == 0 ? 0 : gate_up.numel() / two_f;
  Tensor d = empty_cuda(gate_up.shape(), gate_up.dtype());
  launch_swiglu_backward(gate_up.dtype(), g.raw_data(), gate_up.raw_data(), d.raw_data(), rows,
                         two_f / 2);
  return d;
}

}  // namespace

}  // namespace gpu

namespace {

// Rows of `rows` x 2F (gate | up) and of `rows` x F (out or its gradient).
struct SwigluRows {
  int64_t rows = 0, f = 0;
};

SwigluRows swiglu_rows(const Tensor& gate_up) {
  const int64_t two_f = gate_up.size(-1);
  return {two_f == 0 ? 0 : gate_up.numel() / two_f, two_f / 2};
}

// g (..., F) -> d(gate_up) (..., 2F): d gate = g * up * silu'(gate), d up = g * silu(gate),
// silu'(a) = sigmoid(a) * (1 + a * (1 - sigmoid(a))).
Tensor swiglu_backward(const Tensor& g_in, const Tensor& gate_up) {
  if (gate_up.device() == Device::cuda) return gpu::swiglu_backward(g_in, gate_up);
  Tensor g = g_in.contiguous();
  const auto [rows, f] = swiglu_rows(gate_up);
  Tensor d = Tensor::empty(gate_up.shape(), gate_up.dtype());
  detail::dispatch_float("swiglu", gate_up.dtype(), [&](auto z) {
    using T = decltype(z);
    const T* px = gate_up.data<T>();
    const T* pg = g.data<T>();
    T* pd = d.data<T>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < f; ++i) {
        const T a = px[r * 2 * f + i], u = px[r * 2 * f + f + i], go = pg[r * f + i];
        const T sig = T(1) / (T(1) + std::exp(-a));
        pd[r * 2 * f + i] = go * u * sig * (T(1) + a * (T(1) - sig));
        pd[r * 2 * f + f + i] = go * a * sig;
      }
  });
  return d;
}

}  // namespace

Tensor swiglu(const Tensor& gate_up_in) {
  const char* op = "swiglu";
  detail::require_float(op, gate_up_in, "gate_up");
  DL_CHECK(gate_up_in.dim() >= 1, op, "gate_up must have at least one dim, got a zero-dim tensor");
  DL_CHECK(gate_up_in.size(-1) % 2 == 0, op,
           "last dim of gate_up " << shape_str(gate_up_in.shape())
                                  << " must be even (gate and up halves)");
  const Device dev = detail::device_of(op, {gate_up_in});
  Tensor gate_up = gate_up_in.contiguous();
  const auto [rows, f] = swiglu_rows(gate_up);
  Shape out_shape = gate_up.shape();
  out_shape.back() = f;
  Tensor out;
  if (dev == Device::cuda) {
    out = gpu::swiglu_forward(gate_up);
  } else {
    out = Tensor::empty(out_shape, gate_up.dtype());
    detail::dispatch_float(op, gate_up.dtype(), [&](auto z) {
      using T = decltype(z);
      const T* px = gate_up.data<T>();
      T* po = out.data<T>();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < f; ++i) {
          const T a = px[r * 2 * f + i], u = px[r * 2 * f + f + i];
          po[r * f + i] = a / (T(1) + std::exp(-a)) * u;
        }
    });
  }
  Context ctx;
  ctx.save_for_backward({gate_up});
  return autograd::record(op, {gate_up_in}, out, std::move(ctx),
                          [](Context& c, const std::vector<Tensor>& g) {
                            return std::vector<Tensor>{swiglu_backward(g[0], c.saved_tensors()[0])};
                          });
}

}  // namespace driftless::ops
