// fp32 kernels against the same op in float64 (CONTRIBUTING.md: fp32 op vs float64
// reference, relative error <= 1e-5), forward and input gradients, on one odd shape each.
#include <cmath>
#include <functional>

#include "engine/ops/ops.h"
#include "tests/engine/ops_test_util.h"

namespace driftless {
namespace {

using testing::rnd;

using testing::rms_rel;

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs fn on f32 copies and on f64 inputs; compares the output and every input gradient.
void expect_f32_matches_f64(const char* name, const Fn& fn, const std::vector<Tensor>& in64) {
  std::vector<Tensor> a, b;
  for (const Tensor& t : in64) {
    bool fl = is_floating(t.dtype());
    a.push_back(fl ? t.to(DType::f32).set_requires_grad() : t);
    b.push_back(fl ? t.clone().set_requires_grad() : t);
  }
  Tensor ya = fn(a), yb = fn(b);
  EXPECT_LE(rms_rel(ya, yb), 1e-5) << name << " forward";
  Tensor cot = Tensor::randn(yb.shape(), 99, DType::f64);
  autograd::backward(ya, cot.to(DType::f32));
  autograd::backward(yb, cot);
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].requires_grad()) continue;
    EXPECT_LE(rms_rel(a[i].grad(), b[i].grad()), 1e-5) << name << " d" << i;
  }
}

TEST(OpsF32, MatchesFloat64) {
  expect_f32_matches_f64("matmul",
                         [](const auto& x) { return ops::matmul(x[0], x[1], false, true); },
                         {rnd({3, 7, 13}, 1), rnd({5, 13}, 2)});
  expect_f32_matches_f64("mul", [](const auto& x) { return ops::mul(x[0], x[1]); },
                         {rnd({7, 13}, 3), rnd({13}, 4)});
  expect_f32_matches_f64("mean", [](const auto& x) { return ops::mean(x[0], 1); },
                         {rnd({7, 13, 3}, 5)});
  expect_f32_matches_f64("gelu", [](const auto& x) { return ops::gelu(x[0]); }, {rnd({7, 13}, 6)});
  expect_f32_matches_f64("layer_norm",
                         [](const auto& x) { return ops::layer_norm(x[0], x[1], x[2]); },
                         {rnd({7, 65}, 7), rnd({65}, 8), rnd({65}, 9)});
  expect_f32_matches_f64("softmax", [](const auto& x) { return ops::softmax(x[0], 0); },
                         {rnd({13, 7}, 10)});
  expect_f32_matches_f64("log_softmax", [](const auto& x) { return ops::log_softmax(x[0]); },
                         {rnd({7, 13}, 11)});
  std::vector<int64_t> t = {0, 5, 12, 3, 3, 7, 1};
  expect_f32_matches_f64(
      "cross_entropy", [](const auto& x) { return ops::cross_entropy(x[0], x[1], x[2]); },
      {rnd({7, 13}, 12), Tensor::from_vector(t), Tensor::uniform({7}, 13, 0, 1, DType::f64)});
  expect_f32_matches_f64("embedding", [](const auto& x) { return ops::embedding(x[0], x[1]); },
                         {rnd({13, 7}, 14), Tensor::from_vector(t)});
}

}  // namespace
}  // namespace driftless
