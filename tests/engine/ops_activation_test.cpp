// gelu, layer_norm, softmax, log_softmax: forward values against hand-computed ones,
// finite-difference gradients at odd shapes, bad input.
#include <cmath>

#include "engine/ops/ops.h"
#include "tests/engine/ops_test_util.h"

namespace driftless {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::rnd;

TEST(OpsGelu, ForwardValues) {
  Tensor x = Tensor::from_vector<double>({0, 1, -1, 3});
  auto ref = [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  EXPECT_TRUE(all_close(ops::gelu(x), {0, ref(1), ref(-1), ref(3)}));
  EXPECT_NEAR(ops::gelu(x).at({1}), 0.8411919906082768, 1e-12);  // tanh form, not erf
  EXPECT_NEAR(ops::gelu(x.to(DType::f32)).at({2}), -0.15880800939172324, 1e-7);
}

TEST(OpsGelu, Gradcheck) {
  for (Shape s : {Shape{1}, Shape{7}, Shape{3, 13}, Shape{2, 3, 5}})
    EXPECT_TRUE(gradcheck(
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::gelu(in[0])}; },
        {Tensor::randn(s, 3, DType::f64, 0.0, 2.0)}))
        << shape_str(s);
  EXPECT_DL_ERROR(ops::gelu(Tensor::zeros({2}, DType::bf16)), "[gelu]", "bf16");
}

TEST(OpsLayerNorm, ForwardValues) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, -2, 0, 2}, {2, 3});
  Tensor w = Tensor::from_vector<double>({1, 2, 3});
  Tensor b = Tensor::from_vector<double>({0, 1, -1});
  const double k = 1 / std::sqrt(2.0 / 3.0 + 1e-5);   // row 0: mean 2, var 2/3
  const double k1 = 1 / std::sqrt(8.0 / 3.0 + 1e-5);  // row 1: mean 0, var 8/3
  EXPECT_TRUE(
      all_close(ops::layer_norm(x, w, b, 1e-5), {-k, 1, 3 * k - 1, -2 * k1, 1, 6 * k1 - 1}));
  EXPECT_TRUE(
      all_close(ops::layer_norm(x, Tensor(), Tensor(), 1e-5), {-k, 0, k, -2 * k1, 0, 2 * k1}));
}

TEST(OpsLayerNorm, Gradcheck) {
  uint64_t seed = 1;
  for (Shape s : {Shape{1, 1}, Shape{1, 7}, Shape{3, 13}, Shape{2, 3, 5}, Shape{13}}) {
    const int64_t c = s.back();
    EXPECT_TRUE(gradcheck(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{ops::layer_norm(in[0], in[1], in[2], 1e-5)};
        },
        {rnd(s, seed), rnd({c}, seed + 1), rnd({c}, seed + 2)}))
        << shape_str(s);
    EXPECT_TRUE(gradcheck(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{ops::layer_norm(in[0], Tensor(), Tensor(), 1e-5)};
        },
        {rnd(s, seed + 3)}))
        << shape_str(s) << " without affine";
    seed += 4;
  }
}

TEST(OpsLayerNorm, BadInput) {
  Tensor x = rnd({4, 8}, 1);
  EXPECT_DL_ERROR(ops::layer_norm(x, rnd({7}, 2), rnd({8}, 3)), "[layer_norm]", "weight", "[8]",
                  "[7]");
  EXPECT_DL_ERROR(ops::layer_norm(x, rnd({8}, 2), rnd({8, 1}, 3)), "[layer_norm]", "bias",
                  "[8, 1]");
  EXPECT_DL_ERROR(ops::layer_norm(x, rnd({8}, 2, DType::f32), rnd({8}, 3)), "[layer_norm]", "f32");
  EXPECT_DL_ERROR(ops::layer_norm(rnd({4, 0}, 1), Tensor(), Tensor()), "[layer_norm]", "[4, 0]");
}

TEST(OpsSoftmax, ForwardValues) {
  Tensor x =
      Tensor::from_vector<double>({0, std::log(2.0), std::log(5.0), 1000, 1000, 1000}, {2, 3});
  EXPECT_TRUE(all_close(ops::softmax(x), {0.125, 0.25, 0.625, 1. / 3, 1. / 3, 1. / 3}));
  EXPECT_TRUE(all_close(ops::log_softmax(x), {std::log(0.125), std::log(0.25), std::log(0.625),
                                              -std::log(3.0), -std::log(3.0), -std::log(3.0)}));
  // Over dim 0: columns.
  Tensor y = Tensor::from_vector<double>({0, 0, std::log(3.0), 0}, {2, 2});
  EXPECT_TRUE(all_close(ops::softmax(y, 0), {0.25, 0.5, 0.75, 0.5}));
}

TEST(OpsSoftmax, Gradcheck) {
  uint64_t seed = 1;
  for (Shape s : {Shape{1}, Shape{7}, Shape{3, 13}, Shape{2, 3, 5}, Shape{1, 1, 3}})
    for (int64_t d = 0; d < int64_t(s.size()); ++d) {
      EXPECT_TRUE(gradcheck(
          [d](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{ops::softmax(in[0], d), ops::log_softmax(in[0], d)};
          },
          {rnd(s, seed++)}))
          << shape_str(s) << " dim " << d;
    }
}

TEST(OpsSoftmax, BadInput) {
  EXPECT_DL_ERROR(ops::softmax(rnd({3, 4}, 1), 2), "[softmax]", "dim 2");
  EXPECT_DL_ERROR(ops::log_softmax(Tensor::zeros({3}, DType::i64)), "[log_softmax]", "i64");
}

}  // namespace
}  // namespace driftless
