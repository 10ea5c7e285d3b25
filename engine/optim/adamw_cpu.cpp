// CPU body of the AdamW update (adamw_kernel.h). All arithmetic in f32, in the order the
// CUDA kernel will use, so the two backends can agree to the last bit or close to it.
#include <cmath>

#include "engine/optim/adamw_kernel.h"

namespace driftless::optim {

void adamw_update_cpu(const AdamWKernelArgs& a) {
  const float decay = 1.0f - a.lr * a.weight_decay;
  for (int64_t i = 0; i < a.n; ++i) {
    const float g = a.grads[i] * a.grad_scale;
    const float m = a.beta1 * a.m[i] + a.one_minus_beta1 * g;
    const float v = a.beta2 * a.v[i] + a.one_minus_beta2 * g * g;
    a.m[i] = m;
    a.v[i] = v;
    const float m_hat = m / a.bias_correction1;
    const float v_hat = v / a.bias_correction2;
    a.params[i] = a.params[i] * decay - a.lr * (m_hat / (std::sqrt(v_hat) + a.eps));
    if (a.compute) a.compute[i] = bf16::from_float(a.params[i]);
  }
}

}  // namespace driftless::optim
