// The backends-agree harness of the generic ops' GPU tests (ops_cuda_test.cpp,
// ops_llama_cuda_test.cpp): the one tolerance table, the CPU-vs-cuda check of an op's output
// and input gradients with every cuda run repeated bit for bit, and random inputs.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/tensor.h"
#include "engine/ops/ops.h"
#include "tests/gpu/gpu_test_util.h"

namespace driftless::ops_check {

// ---- The one tolerance table ----
// Metric, per element: |cuda - cpu| / (|cpu| + rms(cpu)); the test asserts its maximum over
// the tensor is <= the entry (rms(cpu) keeps elements that cancel to ~0 meaningful).
// The CPU reference runs in f32 for f32 and bf16 (on the same bf16-rounded inputs) and in
// f64 for f64.
// f32: 0 where both backends do the same IEEE operations (add, mul, scalar ops applied
//   in double then rounded, gathers, copies, the dropout mask); 2e-6 for gelu (device
//   tanhf vs libm, ~2 ulp, plus FMA contraction); 1e-5 for reductions, matmul, norms and
//   softmaxes (fp32 sums in another order than the CPU's double or Eigen's: ~sqrt(n) ulp
//   of the scale for n <= 1e5; the softmaxes' exp is the ex2 approximation, ~2^-22
//   relative plus the rounding of v log2 e).
// bf16: the CUDA op computes in fp32 and rounds its output once (<= 2^-9 relative); a
//   gradient passes through a few such roundings (cotangent, saved output, the backward's
//   own output), so 4 roundings (1.6e-2) for most ops; 3e-2 for softmax / log_softmax /
//   cross-entropy, whose backward re-reads a rounded output through exp().
// f64: both backends accumulate in f64 in different orders: 1e-12.
// swiglu, rope f32: 5e-6, a few ulp of the scale: device expf / sincosf (<= 2 ulp, sincosf
//   over the full range, the same f32 angle on both sides) against libm, plus FMA
//   contraction of the products. rms_norm bf16 rounds twice in its forward (the normalised
//   row, then times the weight, as HF does) against the f32 reference: within 1.6e-2.
struct Tol {
  double f32, bf16, f64;
};
inline const std::map<std::string, Tol> kTolerances = {
    {"add", {1e-5, 1.6e-2, 1e-12}},  // 0 forward; backward sums broadcast dims
    {"sub", {1e-5, 1.6e-2, 1e-12}},
    {"mul", {1e-5, 1.6e-2, 1e-12}},
    {"scale", {0, 1.6e-2, 0}},
    {"add_scalar", {0, 1.6e-2, 0}},
    {"neg", {0, 0, 0}},
    {"broadcast_to", {1e-5, 1.6e-2, 1e-12}},  // backward is sum_to
    {"sum_to", {1e-5, 1.6e-2, 1e-12}},
    {"sum", {1e-5, 1.6e-2, 1e-12}},
    {"mean", {1e-5, 1.6e-2, 1e-12}},
    {"sum_all", {1e-5, 1.6e-2, 1e-12}},
    {"gelu", {2e-6, 1.6e-2, 1e-12}},
    {"layer_norm", {1e-5, 1.6e-2, 1e-12}},
    {"rms_norm", {1e-5, 1.6e-2, 1e-12}},
    {"swiglu", {5e-6, 1.6e-2, 1e-12}},
    {"rope", {5e-6, 1.6e-2, 1e-12}},
    {"softmax", {1e-5, 3e-2, 1e-12}},
    {"log_softmax", {1e-5, 3e-2, 1e-12}},
    {"cross_entropy", {1e-5, 3e-2, 1e-12}},
    {"matmul", {1e-5, 1.6e-2, 1e-12}},
    {"embedding", {1e-5, 1.6e-2, 1e-12}},  // backward sums repeated ids
    {"shape", {0, 0, 0}},  // concat, split, narrow, reshape, transpose, permute, contiguous
    {"dropout", {0, 1.6e-2, 0}},
};

inline double rms(const std::vector<double>& r) {
  double s = 0;
  for (double v : r) s += v * v;
  return std::sqrt(s / double(std::max<size_t>(r.size(), 1)));
}

// max_i |t_i - r_i| / (|r_i| + rms(r)); NaN anywhere in t gives NaN.
inline double max_err(const Tensor& t, const Tensor& r) {
  std::vector<double> a = t.to_vector<double>(), b = r.to_vector<double>();
  EXPECT_EQ(a.size(), b.size());
  const double scale = rms(b) + 1e-30;
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) && !std::isnan(b[i])) return std::nan("");
    const double e = std::abs(a[i] - b[i]) / (std::abs(b[i]) + scale);
    if (e > worst) worst = e;
  }
  return worst;
}

inline double tolerance(const std::string& op, DType dt) {
  const Tol& t = kTolerances.at(op);
  return dt == DType::f32 ? t.f32 : dt == DType::bf16 ? t.bf16 : t.f64;
}

inline void expect_close(const std::string& op, const std::string& what, DType dt, const Tensor& t,
                  const Tensor& r) {
  ASSERT_TRUE(t.defined() && r.defined()) << op << " " << what;
  ASSERT_EQ(t.shape(), r.shape()) << op << " " << what;
  EXPECT_EQ(t.device(), Device::cuda) << op << " " << what;
  const double e = max_err(t, r), tol = tolerance(op, dt);
  std::printf("[ops_cuda] %-13s %-4s %-28s max_err %.3g (tol %.3g)\n", op.c_str(), dtype_name(dt),
              what.c_str(), e, tol);
  EXPECT_TRUE(e <= tol) << op << " " << dtype_name(dt) << " " << what << ": max error " << e
                        << " > tolerance " << tol << " (shape " << shape_str(r.shape()) << ")";
}

inline void expect_bitwise(const std::string& op, const std::string& what, const Tensor& a,
                    const Tensor& b) {
  EXPECT_EQ(a.to_vector<double>(), b.to_vector<double>())
      << op << " " << what << ": two cuda runs on the same inputs differ";
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Result {
  Tensor out;
  std::vector<Tensor> grads;
};

// Runs fn on `inputs` (leaves requiring grad where floating), then backward with `cot`.
inline Result run(const Fn& fn, const std::vector<Tensor>& inputs, const Tensor& cot, bool backward) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) {
    Tensor l = t.detach();
    if (backward && is_floating(l.dtype())) l.set_requires_grad();
    leaves.push_back(l);
  }
  if (inputs.empty() || inputs[0].device() == Device::cuda) testing::poison_cache();
  Result r;
  r.out = fn(leaves);
  if (backward) {
    if (r.out.device() == Device::cuda) testing::poison_cache();
    autograd::backward(r.out, cot);
    for (const Tensor& l : leaves) r.grads.push_back(l.requires_grad() ? l.grad() : Tensor());
  }
  return r;
}

// in: f64 cpu tensors (floating ones are rounded to dt first) or integer tensors. Compares
// the cuda result at dt with the cpu result (f32, or f64 for f64) on the same values.
// positive_cotangent: |N(0, 1)| + 0.25, where a gradient sums many terms into one element
// (signed terms can cancel to ~0, where the relative error is unbounded).
inline void check(const std::string& op, const std::string& name, const Fn& fn,
           const std::vector<Tensor>& in, DType dt, bool backward = true,
           bool positive_cotangent = false) {
  SCOPED_TRACE(op + " " + name + " " + dtype_name(dt));
  const DType cpu_dt = dt == DType::f64 ? DType::f64 : DType::f32;
  std::vector<Tensor> cpu_in, gpu_in;
  testing::inputs_for(in, dt, cpu_in, gpu_in);
  // The cotangent: random values representable in dt.
  Tensor probe = fn(cpu_in);
  Tensor cot64 = Tensor::randn(probe.shape(), testing::fresh_seed("ops_cuda"), DType::f64);
  cot64 = (positive_cotangent ? testing::positive(cot64) : cot64).to(dt);
  Result ref = run(fn, cpu_in, cot64.to(cpu_dt), backward);
  Result a = run(fn, gpu_in, cot64.to(Device::cuda), backward);
  Result b = run(fn, gpu_in, cot64.to(Device::cuda), backward);
  EXPECT_EQ(a.out.dtype(), dt);
  expect_close(op, name + " out", dt, a.out, ref.out);
  expect_bitwise(op, name + " out", a.out, b.out);
  for (size_t i = 0; i < a.grads.size(); ++i) {
    if (!ref.grads[i].defined()) continue;
    const std::string what = name + " d" + std::to_string(i);
    expect_close(op, what, dt, a.grads[i], ref.grads[i]);
    expect_bitwise(op, what, a.grads[i], b.grads[i]);
  }
}

inline Tensor rnd(const Shape& shape) {
  return Tensor::randn(shape, testing::fresh_seed("ops_cuda"), DType::f64);
}

inline constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f64};

}  // namespace driftless::ops_check
