// Linear forward/backward through the generic matmul/sum bodies, recorded as one node.
#include "layers/linear.h"

#include "engine/autograd/autograd.h"
#include "engine/ops/ops.h"

namespace driftless::layers {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  DL_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "linear",
           "x " << shape_str(x.shape()) << " does not match weight (out, in) "
                << shape_str(weight.shape()));
  DL_CHECK(!bias.defined() || bias.shape() == Shape{weight.size(0)}, "linear",
           "bias " << shape_str(bias.shape()) << " must be (" << weight.size(0) << ")");
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    y = ops::matmul(x, weight, false, true);  // (N, out)
    if (bias.defined()) y = ops::add(y, bias);
  }
  autograd::Context ctx;
  ctx.save_for_backward({x, weight});
  const bool has_bias = bias.defined();
  return autograd::record(
      "linear", {x, weight, bias}, y, std::move(ctx),
      [has_bias](autograd::Context& c, const std::vector<Tensor>& g) -> std::vector<Tensor> {
        autograd::NoGradGuard no_grad;
        const Tensor& xs = c.saved_tensors()[0];
        const Tensor& ws = c.saved_tensors()[1];
        Tensor dx = ops::matmul(g[0], ws);              // (N, in)
        Tensor dw = ops::matmul(g[0], xs, true, false);  // (out, in)
        Tensor db = has_bias ? ops::sum(g[0], 0) : Tensor();
        return {dx, dw, db};
      });
}

}  // namespace driftless::layers
