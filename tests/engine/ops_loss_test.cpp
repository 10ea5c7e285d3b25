// cross_entropy (fused, masked, SUM reduction): forward against a plain loop, gradients of
// logits and mask at odd shapes with i32 and i64 targets, bad input naming row and value.
#include <cmath>

#include "engine/ops/ops.h"
#include "tests/engine/ops_test_util.h"

namespace driftless {
namespace {

using testing::gradcheck;
using testing::rnd;

double loop_loss(const Tensor& logits, const std::vector<int64_t>& t,
                 const std::vector<double>& mask) {
  double total = 0;
  for (int64_t r = 0; r < logits.size(0); ++r) {
    double s = 0;
    for (int64_t j = 0; j < logits.size(1); ++j) s += std::exp(logits.at({r, j}));
    total += mask[size_t(r)] * (std::log(s) - logits.at({r, t[size_t(r)]}));
  }
  return total;
}

TEST(OpsCrossEntropy, ForwardValues) {
  // Uniform logits over 4 classes: each row costs log(4).
  Tensor z = Tensor::zeros({3, 4}, DType::f64);
  Tensor t = Tensor::from_vector<int32_t>({0, 3, 1});
  EXPECT_NEAR(ops::cross_entropy(z, t).item(), 3 * std::log(4.0), 1e-12);
  Tensor m = Tensor::from_vector<double>({1, 0, 1});
  EXPECT_NEAR(ops::cross_entropy(z, t, m).item(), 2 * std::log(4.0), 1e-12);
  EXPECT_EQ(ops::cross_entropy(z, t).dim(), 0);

  Tensor x = rnd({7, 13}, 5);
  std::vector<int64_t> tv = {0, 12, 5, 5, 3, 1, 7};
  std::vector<double> mv = {1, 0, 0.5, 1, 2, 0, 1};
  Tensor loss =
      ops::cross_entropy(x, Tensor::from_vector<int64_t>(tv), Tensor::from_vector<double>(mv));
  EXPECT_NEAR(loss.item(), loop_loss(x, tv, mv), 1e-12);
  // f32 and large logits stay finite and accurate.
  Tensor big = ops::scale(x, 1000.0).to(DType::f32);
  Tensor lf = ops::cross_entropy(big, Tensor::from_vector<int64_t>(tv),
                                 Tensor::from_vector<float>({1, 0, 0.5, 1, 2, 0, 1}));
  EXPECT_TRUE(std::isfinite(lf.item()));
  Tensor ld = ops::cross_entropy(ops::scale(x, 1000.0), Tensor::from_vector<int64_t>(tv),
                                 Tensor::from_vector<double>(mv));
  EXPECT_NEAR(lf.item(), ld.item(), 1e-5 * std::abs(ld.item()));
}

TEST(OpsCrossEntropy, GradcheckLogitsAndMask) {
  uint64_t seed = 1;
  for (auto [n, v] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 7}, {3, 13}, {13, 3}}) {
    std::vector<int32_t> t32(static_cast<size_t>(n));
    std::vector<int64_t> t64(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) t32[size_t(i)] = int32_t(t64[size_t(i)] = (i * 5 + 2) % v);
    Tensor mask = Tensor::uniform({n}, seed + 7, 0.0, 2.0, DType::f64);
    if (n > 1) mask.data<double>()[1] = 0;  // a masked-out row
    for (const Tensor& t : {Tensor::from_vector(t32), Tensor::from_vector(t64)}) {
      EXPECT_TRUE(gradcheck(
          [](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{ops::cross_entropy(in[0], in[1], in[2])};
          },
          {rnd({n, v}, seed++), t, mask}))
          << n << "x" << v;
      EXPECT_TRUE(gradcheck(
          [](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{ops::cross_entropy(in[0], in[1])};
          },
          {rnd({n, v}, seed++), t}))
          << n << "x" << v << " without mask";
    }
  }
}

TEST(OpsCrossEntropy, BackwardIsSoftmaxMinusOnehotTimesMask) {
  Tensor x = rnd({2, 3}, 3).set_requires_grad();
  Tensor t = Tensor::from_vector<int64_t>({2, 0});
  Tensor m = Tensor::from_vector<double>({0.5, 0});
  autograd::backward(ops::cross_entropy(x, t, m));
  Tensor p = ops::softmax(x.detach());
  std::vector<double> want = {
      0.5 * p.at({0, 0}), 0.5 * p.at({0, 1}), 0.5 * (p.at({0, 2}) - 1), 0, 0, 0};
  EXPECT_TRUE(testing::all_close(x.grad(), want));
}

TEST(OpsCrossEntropy, BadInput) {
  Tensor x = rnd({4, 5}, 1);
  EXPECT_DL_ERROR(ops::cross_entropy(x, Tensor::from_vector<int64_t>({0, 1, 5, 2})),
                  "[cross_entropy]", "row 2", "target 5", "[0, 5)");
  EXPECT_DL_ERROR(ops::cross_entropy(x, Tensor::from_vector<int32_t>({0, -1, 1, 2})),
                  "[cross_entropy]", "row 1", "-1");
  EXPECT_DL_ERROR(ops::cross_entropy(x, Tensor::from_vector<int64_t>({0, 1, 2})), "[cross_entropy]",
                  "[4, 5]", "[3]");
  EXPECT_DL_ERROR(ops::cross_entropy(x, Tensor::from_vector<double>({0, 1, 2, 3})),
                  "[cross_entropy]", "targets", "f64");
  EXPECT_DL_ERROR(ops::cross_entropy(x, Tensor::from_vector<int64_t>({0, 1, 2, 3}), rnd({3}, 2)),
                  "[cross_entropy]", "loss_mask", "[3]");
  EXPECT_DL_ERROR(
      ops::cross_entropy(x, Tensor::from_vector<int64_t>({0, 1, 2, 3}), rnd({4}, 2, DType::f32)),
      "[cross_entropy]", "f32");
  EXPECT_DL_ERROR(ops::cross_entropy(rnd({4}, 1), Tensor::from_vector<int64_t>({0})),
                  "[cross_entropy]", "(N, V)", "[4]");
}

}  // namespace
}  // namespace driftless
