// linear_gelu (layers/linear.h) on CPU: float64 central differences for x, W and b (tier 1),
// and the fused node equals linear followed by gelu exactly, forward and backward, since
// the CPU body composes those very ops. The cuda bodies are checked in tests/gpu.
#include <gtest/gtest.h>

#include "engine/autograd/autograd.h"
#include "engine/ops/ops.h"
#include "layers/linear.h"
#include "tests/gradcheck.h"

namespace driftless::layers {
namespace {

struct Dims {
  int64_t n, in, out;
};

TEST(LinearGelu, GradcheckF64AtOddShapes) {
  uint64_t seed = 11;
  for (Dims d : {Dims{1, 1, 1}, Dims{3, 5, 7}, Dims{7, 4, 9}, Dims{2, 8, 16}}) {
    for (bool bias : {true, false}) {
      SCOPED_TRACE(shape_str({d.n, d.in, d.out}) + (bias ? " with bias" : " no bias"));
      std::vector<Tensor> in = {Tensor::randn({d.n, d.in}, ++seed, DType::f64),
                                Tensor::randn({d.out, d.in}, ++seed, DType::f64),
                                bias ? Tensor::randn({d.out}, ++seed, DType::f64) : Tensor()};
      auto f = [](const std::vector<Tensor>& t) {
        return std::vector<Tensor>{linear_gelu(t[0], t[1], t[2])};
      };
      if (bias) {
        EXPECT_TRUE(testing::gradcheck(f, in));
      } else {
        in.pop_back();
        EXPECT_TRUE(testing::gradcheck(
            [](const std::vector<Tensor>& t) {
              return std::vector<Tensor>{linear_gelu(t[0], t[1], Tensor())};
            },
            in));
      }
    }
  }
}

TEST(LinearGelu, EqualsLinearThenGeluExactlyInF32) {
  const Dims d{5, 6, 10};
  Tensor x0 = Tensor::randn({d.n, d.in}, 1), w0 = Tensor::randn({d.out, d.in}, 2);
  Tensor b0 = Tensor::randn({d.out}, 3), cot = Tensor::randn({d.n, d.out}, 4);
  auto run = [&](bool fused) {
    Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    Tensor y = fused ? linear_gelu(x, w, b) : ops::gelu(linear(x, w, b));
    autograd::backward(y, cot);
    return std::vector<Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
  };
  std::vector<Tensor> fused = run(true), ref = run(false);
  for (size_t i = 0; i < ref.size(); ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i) + " (y, dx, dW, db)");
    ASSERT_TRUE(fused[i].defined());
    EXPECT_EQ(fused[i].to_vector<float>(), ref[i].to_vector<float>());
  }
}

TEST(LinearGelu, NoGradRecordsNothingAndComputesTheSame) {
  Tensor x = Tensor::randn({4, 3}, 5).set_requires_grad(true);
  Tensor w = Tensor::randn({8, 3}, 6), b = Tensor::randn({8}, 7);
  Tensor with_grad = linear_gelu(x, w, b);
  EXPECT_NE(with_grad.grad_fn(), nullptr);
  autograd::NoGradGuard no_grad;
  Tensor y = linear_gelu(x, w, b);
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.to_vector<float>(), with_grad.to_vector<float>());
}

TEST(LinearGelu, RejectsMismatchedShapes) {
  EXPECT_THROW(linear_gelu(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}), Tensor()), Error);
  EXPECT_THROW(linear_gelu(Tensor::zeros({2, 3}), Tensor::zeros({4, 3}), Tensor::zeros({3})),
               Error);
}

}  // namespace
}  // namespace driftless::layers
