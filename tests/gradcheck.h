// Central finite-difference check of an autograd function in float64 (CONTRIBUTING.md
// tier 1). f maps f64 inputs to outputs; the scalar S = sum_k <out_k, r_k> with fixed
// random cotangents r_k is differentiated analytically (autograd) and numerically.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"

namespace driftless::testing {

using GradFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  uint64_t seed = 1234;
  std::vector<bool> check;  // which inputs to check (default: every floating input)
};

inline double weighted_sum(const std::vector<Tensor>& outs, const std::vector<Tensor>& cot) {
  double s = 0;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!cot[k].defined()) continue;
    auto o = outs[k].to_vector<double>();
    auto r = cot[k].to_vector<double>();
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * r[i];
  }
  return s;
}

// Returns true when every checked gradient matches; failures are reported with the
// input index, element and both values.
inline ::testing::AssertionResult gradcheck(const GradFn& f, std::vector<Tensor> inputs,
                                            GradcheckOptions opt = {}) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    bool want = is_floating(inputs[i].dtype()) &&
                (opt.check.empty() || (i < opt.check.size() && opt.check[i]));
    inputs[i] = inputs[i].clone();
    if (want) inputs[i].set_requires_grad(true);
  }
  std::vector<Tensor> outs = f(inputs);
  std::vector<Tensor> cot;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!outs[k].defined() || !is_floating(outs[k].dtype())) {
      cot.emplace_back();
      continue;
    }
    cot.push_back(Tensor::randn(outs[k].shape(), opt.seed + k, DType::f64));
  }
  // Scalar root S through one node so a single backward covers every output.
  std::vector<Tensor> diff_outs;
  std::vector<Tensor> diff_cot;
  for (size_t k = 0; k < outs.size(); ++k)
    if (cot[k].defined() && outs[k].requires_grad()) {
      diff_outs.push_back(outs[k]);
      diff_cot.push_back(cot[k]);
    }
  if (diff_outs.empty()) return ::testing::AssertionFailure() << "no output requires grad";
  Tensor s = Tensor::full({1}, weighted_sum(diff_outs, diff_cot), DType::f64);
  autograd::Context ctx;
  ctx.save_for_backward(diff_cot);
  s = autograd::record("gradcheck.sum", diff_outs, s, std::move(ctx),
                       [](autograd::Context& c, const std::vector<Tensor>& g) {
                         double gs = g[0].item();
                         std::vector<Tensor> r;
                         for (const auto& t : c.saved_tensors()) {
                           Tensor x = t.clone();
                           double* p = x.data<double>();
                           for (int64_t i = 0; i < x.numel(); ++i) p[i] *= gs;
                           r.push_back(x);
                         }
                         return r;
                       });
  autograd::backward(s);

  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    Tensor analytic = inputs[i].grad();
    std::vector<double> a = analytic.defined() ? analytic.to_vector<double>()
                                               : std::vector<double>(inputs[i].numel(), 0.0);
    double* p = inputs[i].data<double>();
    for (int64_t j = 0; j < inputs[i].numel(); ++j) {
      double orig = p[j];
      p[j] = orig + opt.eps;
      double sp = weighted_sum(f(inputs), cot);
      p[j] = orig - opt.eps;
      double sm = weighted_sum(f(inputs), cot);
      p[j] = orig;
      double numeric = (sp - sm) / (2 * opt.eps);
      if (std::abs(numeric - a[j]) > opt.atol + opt.rtol * std::abs(numeric) ||
          std::isnan(a[j]))
        return ::testing::AssertionFailure()
               << "input " << i << " element " << j << ": analytic " << a[j] << " numeric "
               << numeric << " (shape " << shape_str(inputs[i].shape()) << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace driftless::testing
