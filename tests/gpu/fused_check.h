// The backends-agree harness of the fused-layer GPU tests (fused_cuda_test.cpp,
// lm_loss_cuda_test.cpp): tolerances, the CPU-vs-cuda check with every cuda run repeated bit
// for bit, and the variant whose parameters already have f32 gradient storage.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/tensor.h"
#include "engine/ops/ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace driftless::layers::fused_test {

// Tolerances. Metric per element: |cuda - cpu| / (|cpu| + rms(cpu)), its maximum over the
// tensor. The CPU runs f32 for f32 and bf16 (on the same bf16-rounded inputs), f64 for f64.
// f32: 1e-5, as matmul and cross_entropy in ops_cuda_test: GEMM and softmax sums in fp32
//   in another order than Eigen / the CPU's double (~sqrt(K) ulp of the scale).
// bf16 linear, linear_gelu, mlp: the output is rounded to bf16 once (2^-9), the cotangent and
//   the saved pre-activation are bf16 too, so a gradient passes ~4 roundings: 1.6e-2.
// bf16 lm_loss: the loss is fp32 from fp32 logits (bf16 operands, exact products, fp32
//   accumulation and output): as close as f32, 1e-5, which would fail by far if the logits
//   were rounded to bf16. dx and dW see dlogits rounded once to bf16 as a GEMM operand and
//   are rounded to bf16 on return: twice the error of that rounding emulated in float64
//   (lm_loss_bf16_tols).
// f64 (lm_loss's generic path on cuda): 1e-12.
struct Tol {
  double out, grad;
};
inline Tol tolerance(const std::string& op, DType dt) {
  if (dt == DType::f64) return {1e-12, 1e-12};
  if (dt == DType::f32) return {1e-5, 1e-5};
  if (op == "lm_loss") return {1e-5, 1.6e-2};
  return {1.6e-2, 1.6e-2};
}

inline double max_err(const Tensor& t, const Tensor& r) {
  std::vector<double> a = t.to_vector<double>(), b = r.to_vector<double>();
  EXPECT_EQ(a.size(), b.size());
  double ss = 0;
  for (double v : b) ss += v * v;
  const double scale = std::sqrt(ss / double(std::max<size_t>(b.size(), 1))) + 1e-30;
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i])) return std::nan("");
    worst = std::max(worst, std::abs(a[i] - b[i]) / (std::abs(b[i]) + scale));
  }
  return worst;
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Result {
  Tensor out;
  std::vector<Tensor> grads;
};

inline Result run(const Fn& fn, const std::vector<Tensor>& inputs, const Tensor& cot) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    Tensor l = t.detach();
    if (is_floating(l.dtype())) l.set_requires_grad();
    leaves.push_back(l);
  }
  const bool gpu = inputs[0].device() == Device::cuda;
  if (gpu) testing::poison_cache();
  Result r;
  r.out = fn(leaves);
  if (gpu) testing::poison_cache();
  autograd::backward(r.out, cot);
  for (const Tensor& l : leaves) r.grads.push_back(l.requires_grad() ? l.grad() : Tensor());
  return r;
}

// in: f64 cpu tensors (floating ones rounded to dt first; undefined ones stay undefined)
// or integer tensors (given to fn on the device of the run).
// Per-input gradient tolerances from the inputs (as given to the CPU), the cotangent and the
// CPU reference's gradients; empty: tolerance(op, dt). One element more than the inputs: the
// last is the output's tolerance.
using GradTols = std::function<std::vector<double>(const std::vector<Tensor>& cpu_in,
                                                   const Tensor& cot, const Result& ref)>;

inline void check(const std::string& op, const std::string& name, const Fn& fn,
                  const std::vector<Tensor>& in, DType dt, DType out_dt,
                  const GradTols& grad_tols = {}) {
  SCOPED_TRACE(op + " " + name + " " + dtype_name(dt));
  std::vector<Tensor> cpu_in, gpu_in;
  testing::inputs_for(in, dt, cpu_in, gpu_in);
  Tensor probe;
  {
    autograd::NoGradGuard no_grad;
    probe = fn(cpu_in);
  }
  Tensor cot =
      Tensor::randn(probe.shape(), testing::fresh_seed("fused_cuda"), DType::f64).to(out_dt);
  Result ref = run(fn, cpu_in, cot.to(out_dt == DType::f64 ? DType::f64 : DType::f32));
  Result a = run(fn, gpu_in, cot.to(Device::cuda));
  Result b = run(fn, gpu_in, cot.to(Device::cuda));
  EXPECT_EQ(a.out.dtype(), out_dt);
  const Tol tol = tolerance(op, dt);
  auto expect = [&](const std::string& what, const Tensor& g, const Tensor& r, const Tensor& g2,
                    double t) {
    ASSERT_TRUE(g.defined()) << what;
    ASSERT_EQ(g.shape(), r.shape()) << what;
    EXPECT_EQ(g.device(), Device::cuda) << what;
    const double e = max_err(g, r);
    std::printf("[fused_cuda] %-11s %-4s %-24s %-5s max_err %.3g (tol %.3g)\n", op.c_str(),
                dtype_name(dt), name.c_str(), what.c_str(), e, t);
    EXPECT_TRUE(e <= t) << what << ": max error " << e << " > tolerance " << t;
    EXPECT_EQ(g.to_vector<double>(), g2.to_vector<double>())
        << what << ": two cuda runs on the same inputs differ";
  };
  const std::vector<double> tols = grad_tols ? grad_tols(cpu_in, cot, ref) : std::vector<double>{};
  expect("out", a.out, ref.out, b.out, tols.size() > in.size() ? tols[in.size()] : tol.out);
  for (size_t i = 0; i < ref.grads.size(); ++i)
    if (ref.grads[i].defined())
      expect("d" + std::to_string(i), a.grads[i], ref.grads[i], b.grads[i],
             i < tols.size() ? tols[i] : tol.grad);
}

inline Tensor rnd(const Shape& shape, double scale = 1.0) {
  Tensor t = Tensor::randn(shape, testing::fresh_seed("fused_cuda"), DType::f64);
  if (scale != 1.0) {
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] *= scale;
  }
  return t;
}

// Parameters whose f32 gradient storage exists before backward (the model's gradient slab):
// every floating input but the first gets an f32 .grad of random values first. The cuda
// backward must add into that storage (same buffer, f32 kept) and the sum minus the preset
// values must match the CPU gradient within param_tol; the first input's gradient as usual.
inline void check_into_f32_grads(const std::string& op, const std::string& name, const Fn& fn,
                                 const std::vector<Tensor>& in, DType dt, double param_tol,
                                 const GradTols& grad_tols = {}) {
  SCOPED_TRACE(op + " " + name + " into f32 grads " + dtype_name(dt));
  std::vector<Tensor> cpu_in, gpu_leaves, preset;
  for (const Tensor& t : in) {
    Tensor rounded = t.to(dt);
    cpu_in.push_back(rounded.to(DType::f32));
    gpu_leaves.push_back(rounded.to(Device::cuda).set_requires_grad(true));
  }
  Tensor probe;
  {
    autograd::NoGradGuard no_grad;
    probe = fn(cpu_in);
  }
  Tensor cot = Tensor::randn(probe.shape(), testing::fresh_seed("fused_cuda"), DType::f64).to(dt);
  Result ref = run(fn, cpu_in, cot.to(DType::f32));
  // Preset values of the gradient's own scale, so the f32 rounding of preset + gradient
  // stays an f32 rounding of the gradient.
  for (size_t i = 1; i < gpu_leaves.size(); ++i) {
    std::vector<double> r = ref.grads[i].to_vector<double>();
    double ss = 0;
    for (double v : r) ss += v * v;
    const double rms = std::sqrt(ss / double(std::max<size_t>(r.size(), 1))) + 1e-6;
    preset.push_back(
        Tensor::randn(in[i].shape(), testing::fresh_seed("fused_cuda"), DType::f32, 0.0, rms));
    gpu_leaves[i].set_grad(preset.back().to(Device::cuda));
  }
  std::vector<const void*> storage;
  for (size_t i = 1; i < gpu_leaves.size(); ++i) storage.push_back(gpu_leaves[i].grad().raw_data());
  testing::poison_cache();
  autograd::backward(fn(gpu_leaves), cot.to(Device::cuda));
  const std::vector<double> tols = grad_tols ? grad_tols(cpu_in, cot, ref) : std::vector<double>{};
  auto tol_of = [&](size_t i, double otherwise) { return i < tols.size() ? tols[i] : otherwise; };
  const double dx_err = max_err(gpu_leaves[0].grad(), ref.grads[0]);
  EXPECT_TRUE(dx_err <= tol_of(0, tolerance(op, dt).grad)) << "dx: max error " << dx_err;
  for (size_t i = 1; i < gpu_leaves.size(); ++i) {
    const Tensor g = gpu_leaves[i].grad();
    ASSERT_EQ(g.dtype(), DType::f32) << "d" << i;
    EXPECT_EQ(g.raw_data(), storage[i - 1]) << "d" << i << ": the gradient storage was replaced";
    const Tensor added = ops::sub(g.to(Device::cpu).to(DType::f64), preset[i - 1].to(DType::f64));
    const double e = max_err(added, ref.grads[i]), t = tol_of(i, param_tol);
    std::printf("[fused_cuda] %-11s %-4s %-24s d%zu    max_err %.3g (tol %.3g, into f32 grads)\n",
                op.c_str(), dtype_name(dt), name.c_str(), i, e, t);
    EXPECT_TRUE(e <= t) << "d" << i << ": max error " << e << " > " << t;
  }
}

}  // namespace driftless::layers::fused_test
