// Global gradient-norm clipping (engine/optim/clip.h): the pre-clip norm is returned,
// the scale is applied, nothing changes below max_norm, accumulation is in double.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/optim/clip.h"

namespace driftless::optim {
namespace {

TEST(ClipGradNorm, ScalesAboveMaxNorm) {
  Tensor g = Tensor::from_vector<float>({3, 0, -4, 0});
  EXPECT_DOUBLE_EQ(clip_grad_norm(g, 1.0), 5.0);
  const double c = 1.0 / (5.0 + 1e-6);  // torch.nn.utils.clip_grad_norm_'s coefficient
  EXPECT_FLOAT_EQ(float(g.at({0})), float(3 * c));
  EXPECT_FLOAT_EQ(float(g.at({2})), float(-4 * c));
  EXPECT_EQ(g.at({1}), 0.0);
  EXPECT_NEAR(std::sqrt(grad_norm_squared(g)), 1.0, 1e-6);
}

TEST(ClipGradNorm, NoChangeBelowMaxNorm) {
  Tensor g = Tensor::randn({1001}, 3);
  Tensor before = g.clone();
  const double norm = clip_grad_norm(g, 1e6);
  EXPECT_GT(norm, 20.0);  // ~sqrt(1001)
  EXPECT_EQ(g.to_vector<float>(), before.to_vector<float>());
}

TEST(ClipGradNorm, SeveralTensorsAreOneGlobalNorm) {
  Tensor a = Tensor::from_vector<float>({3}), b = Tensor::from_vector<double>({4});
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, b}, 2.5), 5.0);
  EXPECT_NEAR(a.at({0}), 1.5, 1e-6);
  EXPECT_NEAR(b.at({0}), 2.0, 1e-6);
}

// 2^20 values of 0.1f: a float sum of squares would be off by ~1e-3 relative; a double
// one by ~1e-12 (rounding grows with n * 2^-53).
TEST(ClipGradNorm, AccumulatesInDouble) {
  const int64_t n = int64_t(1) << 20;
  Tensor g = Tensor::full({n}, 0.1);
  const double x = double(0.1f);
  EXPECT_NEAR(clip_grad_norm(g, 1e9) / (std::sqrt(double(n)) * x), 1.0, 1e-10);
}

// The sharded recipe: per-shard squared norms summed, then one coefficient for all.
TEST(ClipGradNorm, ShardedRecipeMatches) {
  Tensor g = Tensor::randn({100}, 5), whole = g.clone();
  Tensor lo = g.narrow(0, 0, 37), hi = g.narrow(0, 37, 63);
  const double norm = std::sqrt(grad_norm_squared(lo) + grad_norm_squared(hi));
  const double c = clip_coefficient(norm, 0.5);
  scale_grads(lo, c);
  scale_grads(hi, c);
  EXPECT_DOUBLE_EQ(clip_grad_norm(whole, 0.5), norm);
  std::vector<float> a = g.to_vector<float>(), b = whole.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(a[i], b[i]) << i;
}

TEST(ClipGradNorm, NonFiniteNormLeavesGradsAlone) {
  Tensor g = Tensor::from_vector<float>({1, NAN, 2});
  EXPECT_TRUE(std::isnan(clip_grad_norm(g, 1.0)));
  EXPECT_EQ(g.at({0}), 1.0);
  EXPECT_EQ(g.at({2}), 2.0);
  EXPECT_THROW(clip_grad_norm(g, 0.0), Error);
  EXPECT_THROW(clip_grad_norm(Tensor::zeros({2}, DType::i32), 1.0), Error);
}

}  // namespace
}  // namespace driftless::optim
