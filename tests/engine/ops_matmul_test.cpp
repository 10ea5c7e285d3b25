// matmul: finite-difference gradients for every transpose combination, batching and
// broadcast of a 2-D operand at odd shapes; forward against a plain loop; bad input.
#include "engine/ops/ops.h"
#include "tests/engine/ops_test_util.h"

namespace driftless {
namespace {

using testing::gradcheck;
using testing::rnd;

// Plain-loop reference for 2-D a (M, K), b (K, N).
std::vector<double> loop_matmul(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<double> c(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) c[size_t(i * n + j)] += a.at({i, l}) * b.at({l, j});
  return c;
}

Shape stored(Shape s, bool trans) {
  if (trans) std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}

TEST(OpsMatmul, ForwardMatchesLoop) {
  Tensor a = rnd({3, 7}, 1, DType::f32), b = rnd({7, 5}, 2, DType::f32);
  EXPECT_TRUE(testing::all_close(ops::matmul(a, b), loop_matmul(a, b), 1e-5));
  // Transposed operands read the same matrices.
  EXPECT_TRUE(testing::all_close(ops::matmul(a.transpose(0, 1).contiguous(), b, true, false),
                                 loop_matmul(a, b), 1e-5));
  EXPECT_TRUE(testing::all_close(ops::matmul(a, b.transpose(0, 1).contiguous(), false, true),
                                 loop_matmul(a, b), 1e-5));
  // Non-contiguous inputs are fine.
  EXPECT_TRUE(testing::all_close(ops::matmul(a, b.transpose(0, 1).contiguous().transpose(0, 1)),
                                 loop_matmul(a, b), 1e-5));
}

TEST(OpsMatmul, BatchedForwardIsPerBatch) {
  Tensor a = rnd({2, 3, 4, 5}, 3), b = rnd({2, 3, 5, 6}, 4);
  Tensor c = ops::matmul(a, b);
  ASSERT_EQ(c.shape(), (Shape{2, 3, 4, 6}));
  Tensor c12 = c.select(0, 1).select(0, 2);
  EXPECT_TRUE(testing::all_close(
      c12, loop_matmul(a.select(0, 1).select(0, 2), b.select(0, 1).select(0, 2))));
  Tensor w = rnd({5, 6}, 5);
  Tensor d = ops::matmul(a, w);  // folded path
  EXPECT_TRUE(
      testing::all_close(d.select(0, 1).select(0, 0), loop_matmul(a.select(0, 1).select(0, 0), w)));
}

struct MatmulCase {
  Shape a, b;  // untransposed shapes (B..., M, K), (B..., K, N)
};

TEST(OpsMatmul, GradcheckAllTransposes) {
  std::vector<MatmulCase> cases = {{{1, 1}, {1, 1}},
                                   {{3, 7}, {7, 13}},
                                   {{7, 1}, {1, 3}},
                                   {{2, 3, 5}, {2, 5, 4}},
                                   {{2, 3, 1, 7}, {2, 3, 7, 3}},
                                   {{2, 3, 5}, {5, 7}},
                                   {{3, 5}, {2, 5, 7}},
                                   {{2, 2, 3, 4}, {4, 1}}};
  uint64_t seed = 10;
  for (const auto& cs : cases)
    for (int t = 0; t < 4; ++t) {
      bool ta = t & 1, tb = t & 2;
      Tensor a = rnd(stored(cs.a, ta), seed++), b = rnd(stored(cs.b, tb), seed++);
      EXPECT_TRUE(gradcheck(
          [&](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{ops::matmul(in[0], in[1], ta, tb)};
          },
          {a, b}))
          << "a " << shape_str(a.shape()) << " b " << shape_str(b.shape()) << " ta " << ta << " tb "
          << tb;
    }
}

TEST(OpsMatmul, BadInput) {
  Tensor a = rnd({64, 64}, 1), b = rnd({32, 8}, 2);
  EXPECT_DL_ERROR(ops::matmul(a, b), "[matmul]", "[64, 64]", "[32, 8]");
  EXPECT_DL_ERROR(ops::matmul(rnd({3, 4}, 1), rnd({4, 2}, 2, DType::f32)), "[matmul]", "f64",
                  "f32");
  EXPECT_DL_ERROR(ops::matmul(rnd({4}, 1), rnd({4, 2}, 2)), "[matmul]", "[4]");
  EXPECT_DL_ERROR(ops::matmul(rnd({2, 3, 4}, 1), rnd({3, 4, 2}, 2)), "[matmul]", "batch",
                  "[2, 3, 4]", "[3, 4, 2]");
  EXPECT_DL_ERROR(
      ops::matmul(Tensor::zeros({2, 2}, DType::bf16), Tensor::zeros({2, 2}, DType::bf16)),
      "[matmul]", "bf16");
  EXPECT_DL_ERROR(ops::matmul(Tensor::zeros({2, 2}, DType::i32), Tensor::zeros({2, 2}, DType::i32)),
                  "[matmul]", "i32");
}

}  // namespace
}  // namespace driftless
