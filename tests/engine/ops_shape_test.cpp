// concat, split (multi-output), narrow, reshape, transpose, permute, contiguous: values,
// view semantics, gradients at odd shapes, bad input.
#include "engine/autograd/autograd.h"
#include "engine/ops/ops.h"
#include "tests/engine/ops_test_util.h"

namespace driftless {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::rnd;

TEST(OpsShape, ConcatAndSplitValues) {
  Tensor a = Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector<double>({5, 6}, {2, 1});
  EXPECT_TRUE(all_close(ops::concat({a, b}, 1), {1, 2, 5, 3, 4, 6}));
  EXPECT_TRUE(all_close(ops::concat({a, a}, 0), {1, 2, 3, 4, 1, 2, 3, 4}));
  auto parts = ops::split(ops::concat({a, b}, -1), {1, 2}, 1);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_TRUE(all_close(parts[0], {1, 3}));
  EXPECT_TRUE(all_close(parts[1], {2, 5, 4, 6}));
  // Zero-size pieces are allowed.
  auto z = ops::split(a, {0, 2}, 0);
  EXPECT_EQ(z[0].shape(), (Shape{0, 2}));
}

// concat's backward hands split's backward adjacent blocks of the one upstream gradient,
// which split takes whole (Tensor::joined, no copy): the same values as a concat, and the
// upstream gradient is left as it was.
TEST(OpsShape, SplitBackwardOfAdjacentBlocks) {
  Tensor x = rnd({3, 7}, 5).set_requires_grad();
  Tensor y = ops::concat(ops::split(x, {2, 0, 5}, 1), 1);
  Tensor seed = rnd({3, 7}, 6);
  const std::vector<double> before = seed.to_vector<double>();
  autograd::backward(y, seed);
  EXPECT_EQ(x.grad().to_vector<double>(), before);
  EXPECT_EQ(seed.to_vector<double>(), before);
}

TEST(OpsShape, ViewsShareStorage) {
  Tensor x = rnd({3, 4}, 1);
  EXPECT_TRUE(ops::narrow(x, 1, 1, 2).shares_storage(x));
  EXPECT_TRUE(ops::transpose(x, 0, 1).shares_storage(x));
  EXPECT_TRUE(ops::permute(x, {1, 0}).shares_storage(x));
  EXPECT_TRUE(ops::reshape(x, {2, -1}).shares_storage(x));
  EXPECT_TRUE(ops::split(x, {1, 2}, 0)[1].shares_storage(x));
  EXPECT_FALSE(ops::contiguous(ops::transpose(x, 0, 1)).shares_storage(x));
  EXPECT_EQ(ops::reshape(x, {2, -1}).shape(), (Shape{2, 6}));
  EXPECT_DOUBLE_EQ(ops::narrow(x, 1, 1, 2).at({2, 1}), x.at({2, 2}));
  EXPECT_DOUBLE_EQ(ops::permute(rnd({2, 3, 4}, 2), {2, 0, 1}).at({3, 1, 2}),
                   rnd({2, 3, 4}, 2).at({1, 2, 3}));
}

TEST(OpsShape, Gradcheck) {
  uint64_t seed = 1;
  auto check = [&](auto fn, std::vector<Tensor> in, const char* what) {
    EXPECT_TRUE(gradcheck(fn, std::move(in))) << what;
  };
  for (Shape s : {Shape{1, 1}, Shape{3, 7}, Shape{2, 5, 3}}) {
    const int64_t r = int64_t(s.size());
    for (int64_t d = 0; d < r; ++d) {
      Shape s2 = s;
      s2[d] = 2;
      check(
          [d](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{ops::concat({in[0], in[1], in[0]}, d)};
          },
          {rnd(s, seed++), rnd(s2, seed++)}, "concat");
      const int64_t n = s[d];
      check(
          [d, n](const std::vector<Tensor>& in) {
            return ops::split(in[0], {n - n / 2, 0, n / 2}, d);
          },
          {rnd(s, seed++)}, "split");
      check(
          [d, n](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{ops::narrow(in[0], d, n / 2, n - n / 2)};
          },
          {rnd(s, seed++)}, "narrow");
      check(
          [d, r](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{ops::transpose(in[0], d, r - 1)};
          },
          {rnd(s, seed++)}, "transpose");
    }
    check(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{ops::reshape(in[0], {-1})};
        },
        {rnd(s, seed++)}, "reshape");
    // reshape of a non-contiguous view (copies) and contiguous().
    check(
        [](const std::vector<Tensor>& in) {
          Tensor t = ops::transpose(in[0], 0, -1);
          return std::vector<Tensor>{ops::reshape(t, {-1, 1}), ops::contiguous(t)};
        },
        {rnd(s, seed++)}, "reshape of transpose");
  }
  check(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::permute(in[0], {2, 0, 1})};
      },
      {rnd({2, 3, 5}, seed++)}, "permute");
  // A view op feeding a compute op: gradient flows through the view.
  check(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{
            ops::matmul(ops::transpose(in[0], 0, 1), ops::narrow(in[1], 0, 1, 3))};
      },
      {rnd({3, 7}, seed++), rnd({5, 4}, seed++)}, "matmul of views");
}

TEST(OpsShape, BadInput) {
  EXPECT_DL_ERROR(ops::concat({rnd({2, 3}, 1), rnd({3, 3}, 2)}, 1), "[concat]", "[3, 3]", "[2, 3]");
  EXPECT_DL_ERROR(ops::concat({rnd({2, 3}, 1), rnd({2, 3}, 2, DType::f32)}, 0), "[concat]", "f32");
  EXPECT_DL_ERROR(ops::concat({}, 0), "[concat]");
  EXPECT_DL_ERROR(ops::concat({rnd({2}, 1)}, 1), "[concat]", "dim 1");
  EXPECT_DL_ERROR(ops::split(rnd({2, 5}, 1), {2, 2}, 1), "[split]", "4", "[2, 5]");
  EXPECT_DL_ERROR(ops::narrow(rnd({2, 5}, 1), 1, 3, 3), "[narrow]", "[2, 5]");
  EXPECT_DL_ERROR(ops::reshape(rnd({2, 5}, 1), {3, -1}), "[reshape]", "[2, 5]");
  EXPECT_DL_ERROR(ops::permute(rnd({2, 5}, 1), {0, 0}), "[permute]", "twice");
  EXPECT_DL_ERROR(ops::transpose(rnd({2, 5}, 1), 0, 2), "[transpose]", "dim 2");
}

}  // namespace
}  // namespace driftless
