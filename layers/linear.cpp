// Linear and Linear+GELU as one autograd node each. CPU: the generic matmul/add/gelu bodies.
// cuda: one cuBLASLt GEMM with the bias (or bias and GELU, writing the pre-activation as
// its auxiliary output) in the epilogue. Backward in both: dpre = gelu'(pre) g, then
// dx = dpre W, dW = dpre^T x, db = sum_rows dpre. A DGELU epilogue does not pay here: it
// would fuse gelu' into the GEMM that produces g, which belongs to the next node (c_proj).
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

// x W^T + b without recording; the cuda body fuses the bias into the GEMM.
Tensor affine(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  autograd::NoGradGuard no_grad;
  if (x.device() == Device::cuda)
    return ops::gpu::linear_forward(x.contiguous(), weight.contiguous(),
                                    bias.defined() ? bias.contiguous() : Tensor());
  Tensor y = ops::matmul(x, weight, false, true);  // (N, out)
  return bias.defined() ? ops::add(y, bias) : y;
}

// {dx, dW, db} of y = x W^T + b from dy (N, out).
std::vector<Tensor> affine_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                    bool has_bias) {
  autograd::NoGradGuard no_grad;
  Tensor dx = ops::matmul(dy, weight);                // (N, in)
  Tensor dw = ops::matmul(dy, x, true, false);        // (out, in)
  Tensor db = has_bias ? ops::sum(dy, 0) : Tensor();  // (out)
  return {dx, dw, db};
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_args("linear", x, weight, bias);
  Tensor y = affine(x, weight, bias);
  autograd::Context ctx;
  ctx.save_for_backward({x, weight});
  const bool has_bias = bias.defined();
  return autograd::record(
      "linear", {x, weight, bias}, y, std::move(ctx),
      [has_bias](autograd::Context& c, const std::vector<Tensor>& g) -> std::vector<Tensor> {
        return affine_backward(g[0], c.saved_tensors()[0], c.saved_tensors()[1], has_bias);
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
  const bool has_bias = bias.defined();
  return autograd::record(
      "linear_gelu", {x, weight, bias}, y, std::move(ctx),
      [has_bias](autograd::Context& c, const std::vector<Tensor>& g) -> std::vector<Tensor> {
        const auto& s = c.saved_tensors();
        auto node = std::any_cast<std::shared_ptr<autograd::Node>>(c.data());
        Tensor dpre;  // (N, out)
        {
          autograd::NoGradGuard no_grad;
          dpre = node ? node->apply({g[0]})[0] : ops::gpu::gelu_backward(g[0], s[2]);
        }
        return affine_backward(dpre, s[0], s[1], has_bias);
      });
}

}  // namespace driftless::layers
