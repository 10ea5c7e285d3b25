// Linear and Linear+GELU as one autograd node each, and the MLP (both) as one node on cuda
// in bf16. CPU: the generic matmul/add/gelu bodies. cuda: one cuBLASLt GEMM with the bias
// (or bias and GELU, writing the pre-activation as its auxiliary output) in the epilogue.
// Backward: dpre = gelu'(pre) g, then dx = dpre W, dW = dpre^T x, db = sum_rows dpre; on
// cuda dW and db go straight into the parameters' f32 gradients (db from a column-sum kernel),
// and the MLP node takes gelu' in the DGELU epilogue of the GEMM that produces g (which a
// linear_gelu node cannot: that GEMM belongs to the next node, c_proj).
#include "layers/linear.h"

#include <memory>

#include "engine/autograd/autograd.h"
#include "engine/ops/cuda/backend.h"
#include "engine/ops/ops.h"

namespace driftless::layers {

namespace {

void check_args(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  DL_CHECK(x.defined() && weight.defined(), op, "x and weight must be defined tensors");
  DL_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), op,
           "x " << shape_str(x.shape()) << " does not match weight (out, in) "
                << shape_str(weight.shape()));
  DL_CHECK(!bias.defined() || bias.shape() == Shape{weight.size(0)}, op,
           "bias " << shape_str(bias.shape()) << " must be (" << weight.size(0) << ")");
  DL_CHECK(x.device() == weight.device() && (!bias.defined() || bias.device() == x.device()), op,
           "x, weight and bias must be on one device");
}

// x W^T + b [+ residual] without recording; the cuda body fuses the bias (and the residual)
// into the GEMM.
Tensor affine(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Tensor& residual = Tensor()) {
  autograd::NoGradGuard no_grad;
  if (x.device() == Device::cuda)
    return ops::gpu::linear_forward(x.contiguous(), weight.contiguous(),
                                    bias.defined() ? bias.contiguous() : Tensor(),
                                    residual.defined() ? residual.contiguous() : Tensor());
  Tensor y = ops::matmul(x, weight, false, true);  // (N, out)
  if (bias.defined()) y = ops::add(y, bias);
  return residual.defined() ? ops::add(y, residual) : y;
}

// {dW, db} of y = x W^T + b from dy (N, out). On cuda they are added straight into the
// f32 gradient storage of the weight and bias leaves when both have it (returned undefined
// then: see autograd::accumulating_grad); otherwise computed and returned.
std::vector<Tensor> param_grads(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                const Tensor& bias) {
  autograd::NoGradGuard no_grad;
  const bool has_bias = bias.defined();
  if (dy.device() == Device::cuda && dy.dtype() == x.dtype() &&
      (dy.dtype() == DType::f32 || dy.dtype() == DType::bf16)) {
    const Tensor dw = autograd::accumulating_grad(weight);
    const Tensor db = has_bias ? autograd::accumulating_grad(bias) : Tensor();
    if (dw.defined() && (!has_bias || db.defined())) {
      ops::gpu::linear_param_grads(dy.contiguous(), x.contiguous(), dw, db);
      return {Tensor(), Tensor()};
    }
  }
  Tensor dw = ops::matmul(dy, x, true, false);        // (out, in)
  Tensor db = has_bias ? ops::sum(dy, 0) : Tensor();  // (out)
  return {dw, db};
}

// {dx, dW, db} of y = x W^T + b from dy (N, out); w is the saved weight, weight and bias the
// leaves (param_grads).
std::vector<Tensor> affine_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                    const Tensor& weight, const Tensor& bias) {
  Tensor dx;
  {
    autograd::NoGradGuard no_grad;
    dx = ops::matmul(dy, w);  // (N, in)
  }
  std::vector<Tensor> p = param_grads(dy, x, weight, bias);
  return {dx, p[0], p[1]};
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual) {
  check_args("linear", x, weight, bias);
  DL_CHECK(!residual.defined() || (residual.shape() == Shape({x.size(0), weight.size(0)}) &&
                                   residual.dtype() == x.dtype() &&
                                   residual.device() == x.device()),
           "linear", "residual " << shape_str(residual.shape()) << " must be ("
                                 << x.size(0) << ", " << weight.size(0) << ") like the output");
  Tensor y = affine(x, weight, bias, residual);
  autograd::Context ctx;
  ctx.save_for_backward({x, weight});
  const bool has_residual = residual.defined();
  return autograd::record(
      "linear", {x, weight, bias, residual}, y, std::move(ctx),
      [weight, bias, has_residual](autograd::Context& c,
                                   const std::vector<Tensor>& g) -> std::vector<Tensor> {
        std::vector<Tensor> r =
            affine_backward(g[0], c.saved_tensors()[0], c.saved_tensors()[1], weight, bias);
        r.push_back(has_residual ? g[0] : Tensor());  // d residual = dy
        return r;
      });
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_args("linear_gelu", x, weight, bias);
  bool recording = false;
  if (autograd::grad_enabled())
    for (const Tensor& t : {x, weight, bias}) recording = recording || t.requires_grad();
  Tensor y, pre;  // (N, out) each
  std::shared_ptr<autograd::Node> gelu_node;
  if (x.device() == Device::cuda) {
    autograd::NoGradGuard no_grad;
    std::vector<Tensor> r = ops::gpu::linear_gelu_forward(
        x.contiguous(), weight.contiguous(), bias.defined() ? bias.contiguous() : Tensor());
    y = r[0];
    pre = r[1];
  } else {
    pre = affine(x, weight, bias);
    if (recording) {
      // The CPU backward of the GELU is the gelu op's own: record it on a private leaf
      // (it saves pre) and apply its node in this node's backward.
      Tensor leaf = pre.detach();
      leaf.set_requires_grad(true);
      Tensor out = ops::gelu(leaf);
      gelu_node = out.grad_fn();
      y = out.detach();
    } else {
      autograd::NoGradGuard no_grad;
      y = ops::gelu(pre);
    }
  }
  autograd::Context ctx;
  ctx.save_for_backward({x, weight, gelu_node ? Tensor() : pre});
  ctx.data() = gelu_node;
  return autograd::record(
      "linear_gelu", {x, weight, bias}, y, std::move(ctx),
      [weight, bias](autograd::Context& c, const std::vector<Tensor>& g) -> std::vector<Tensor> {
        const auto& s = c.saved_tensors();
        auto node = std::any_cast<std::shared_ptr<autograd::Node>>(c.data());
        Tensor dpre;  // (N, out)
        {
          autograd::NoGradGuard no_grad;
          dpre = node ? node->apply({g[0]})[0] : ops::gpu::gelu_backward(g[0], s[2]);
        }
        return affine_backward(dpre, s[0], s[1], weight, bias);
      });
}

Tensor mlp(const Tensor& x, const Tensor& w_fc, const Tensor& b_fc, const Tensor& w_proj,
           const Tensor& b_proj, const Tensor& residual) {
  check_args("mlp", x, w_fc, b_fc);
  if (x.device() != Device::cuda || x.dtype() != DType::bf16 || !b_fc.defined())
    return linear(linear_gelu(x, w_fc, b_fc), w_proj, b_proj, residual);
  DL_CHECK(!residual.defined() || (residual.shape() == Shape({x.size(0), w_proj.size(0)}) &&
                                   residual.dtype() == x.dtype() &&
                                   residual.device() == x.device()),
           "mlp", "residual " << shape_str(residual.shape()) << " must be (" << x.size(0) << ", "
                              << w_proj.size(0) << ") like the output");
  Tensor y, h, pre;
  {
    autograd::NoGradGuard no_grad;
    std::vector<Tensor> r = ops::gpu::linear_gelu_forward(x.contiguous(), w_fc.contiguous(),
                                                          b_fc.contiguous());
    h = r[0];
    pre = r[1];
    check_args("mlp", h, w_proj, b_proj);
    y = affine(h, w_proj, b_proj, residual);
  }
  autograd::Context ctx;
  ctx.save_for_backward({x, w_fc, pre, h, w_proj});
  const bool has_residual = residual.defined();
  return autograd::record(
      "mlp", {x, w_fc, b_fc, w_proj, b_proj, residual}, y, std::move(ctx),
      [w_fc, b_fc, w_proj, b_proj, has_residual](
          autograd::Context& c, const std::vector<Tensor>& g) -> std::vector<Tensor> {
        const auto& s = c.saved_tensors();
        const Tensor dy = g[0].contiguous();
        Tensor dpre;  // (N, 4C) = (dy W_proj) * gelu'(pre)
        {
          autograd::NoGradGuard no_grad;
          dpre = ops::gpu::linear_dgelu_input_grad(dy, s[4].contiguous(), s[2]);
          if (!dpre.defined()) dpre = ops::gpu::gelu_backward(ops::matmul(dy, s[4]), s[2]);
        }
        std::vector<Tensor> proj = param_grads(dy, s[3], w_proj, b_proj);
        std::vector<Tensor> fc = affine_backward(dpre, s[0], s[1], w_fc, b_fc);
        return {fc[0], fc[1], fc[2], proj[0], proj[1], has_residual ? g[0] : Tensor()};
      });
}

}  // namespace driftless::layers
