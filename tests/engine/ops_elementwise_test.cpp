// add, sub, mul with equal shapes, a trailing bias row and general numpy broadcasting;
// scale, add_scalar, neg, broadcast_to, sum_to: gradients, forward values, bad input.
#include "engine/ops/ops.h"
#include "tests/engine/ops_test_util.h"

namespace driftless {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::rnd;

using Binary = Tensor (*)(const Tensor&, const Tensor&);

TEST(OpsElementwise, ForwardValues) {
  Tensor a = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = Tensor::from_vector<double>({10, 20, 30}, {3});
  Tensor col = Tensor::from_vector<double>({100, 200}, {2, 1});
  EXPECT_TRUE(all_close(ops::add(a, row), {11, 22, 33, 14, 25, 36}));
  EXPECT_TRUE(all_close(ops::sub(a, col), {-99, -98, -97, -196, -195, -194}));
  EXPECT_TRUE(all_close(ops::mul(a, a), {1, 4, 9, 16, 25, 36}));
  EXPECT_TRUE(all_close(ops::mul(col, row), {1000, 2000, 3000, 2000, 4000, 6000}));
  EXPECT_TRUE(all_close(ops::scale(a, -0.5), {-0.5, -1, -1.5, -2, -2.5, -3}));
  EXPECT_TRUE(all_close(ops::add_scalar(a, 1), {2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(all_close(ops::neg(row), {-10, -20, -30}));
  EXPECT_TRUE(all_close(ops::broadcast_to(col, {2, 2}), {100, 100, 200, 200}));
  EXPECT_TRUE(all_close(ops::sum_to(a, {3}), {5, 7, 9}));
  EXPECT_TRUE(all_close(ops::sum_to(a, {2, 1}), {6, 15}));
  // Strided (transposed) input.
  EXPECT_TRUE(all_close(ops::add(a.transpose(0, 1), Tensor::zeros({3, 2}, DType::f64)),
                        {1, 4, 2, 5, 3, 6}));
  // f32 works too.
  EXPECT_TRUE(
      all_close(ops::add(a.to(DType::f32), row.to(DType::f32)), {11, 22, 33, 14, 25, 36}, 1e-6));
}

TEST(OpsElementwise, GradcheckBroadcastShapes) {
  std::vector<std::pair<Shape, Shape>> shapes = {
      {{1}, {1}},          {{7}, {7}},       {{13, 3}, {13, 3}}, {{7, 13}, {13}},
      {{3, 1, 5}, {4, 1}}, {{1, 7}, {3, 1}}, {{2, 3, 7}, {}},    {{3}, {2, 3, 3}}};
  std::vector<std::pair<const char*, Binary>> ops_list = {
      {"add", ops::add}, {"sub", ops::sub}, {"mul", ops::mul}};
  uint64_t seed = 1;
  for (auto [name, fn] : ops_list)
    for (const auto& [sa, sb] : shapes) {
      EXPECT_TRUE(gradcheck(
          [fn = fn](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{fn(in[0], in[1])};
          },
          {rnd(sa, seed++), rnd(sb, seed++)}))
          << name << " " << shape_str(sa) << " " << shape_str(sb);
    }
}

TEST(OpsElementwise, GradcheckUnary) {
  for (Shape s : {Shape{1}, Shape{3, 7}, Shape{2, 1, 13}}) {
    auto check = [&](auto fn) {
      EXPECT_TRUE(
          gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; },
                    {rnd(s, 7)}))
          << shape_str(s);
    };
    check([](const Tensor& x) { return ops::scale(x, -1.7); });
    check([](const Tensor& x) { return ops::add_scalar(x, 3.0); });
    check([](const Tensor& x) { return ops::neg(x); });
    check([](const Tensor& x) {
      Shape t = x.shape();
      t.insert(t.begin(), 3);
      return ops::broadcast_to(x, t);
    });
    check([](const Tensor& x) { return ops::sum_to(x, Shape{x.shape().back()}); });
  }
  // sum_to over a kept size-1 dim and broadcast_to inserting a middle dim.
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::sum_to(in[0], {3, 1})};
      },
      {rnd({3, 7}, 9)}));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::broadcast_to(in[0], {3, 5, 7})};
      },
      {rnd({3, 1, 7}, 10)}));
}

TEST(OpsElementwise, BadInput) {
  EXPECT_DL_ERROR(ops::add(rnd({3, 4}, 1), rnd({5}, 2)), "[add]", "[3, 4]", "[5]");
  EXPECT_DL_ERROR(ops::mul(rnd({2, 3}, 1), rnd({3, 3}, 2)), "[mul]", "[2, 3]", "[3, 3]");
  EXPECT_DL_ERROR(ops::sub(rnd({3}, 1), rnd({3}, 2, DType::f32)), "[sub]", "f64", "f32");
  EXPECT_DL_ERROR(ops::add(Tensor::zeros({3}, DType::bf16), Tensor::zeros({3}, DType::bf16)),
                  "[add]", "bf16");
  EXPECT_DL_ERROR(ops::add(Tensor(), rnd({3}, 1)), "[add]", "undefined");
  EXPECT_DL_ERROR(ops::scale(Tensor::zeros({3}, DType::i64), 2.0), "[scale]", "i64");
  EXPECT_DL_ERROR(ops::broadcast_to(rnd({3, 2}, 1), {3, 3}), "[broadcast_to]", "[3, 2]", "[3, 3]");
  EXPECT_DL_ERROR(ops::sum_to(rnd({3, 2}, 1), {4}), "[sum_to]", "[3, 2]", "[4]");
  EXPECT_DL_ERROR(ops::sum_to(rnd({3}, 1), {2, 3}), "[sum_to]", "[3]", "[2, 3]");
}

}  // namespace
}  // namespace driftless
