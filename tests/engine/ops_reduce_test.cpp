// sum, mean over each dim with and without keepdim, sum_all: gradients at odd shapes,
// forward values by hand, bad input.
#include "engine/ops/ops.h"
#include "tests/engine/ops_test_util.h"

namespace driftless {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::rnd;

TEST(OpsReduce, ForwardValues) {
  Tensor a = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(all_close(ops::sum(a, 0), {5, 7, 9}));
  EXPECT_TRUE(all_close(ops::sum(a, -1), {6, 15}));
  EXPECT_TRUE(all_close(ops::mean(a, 1), {2, 5}));
  EXPECT_TRUE(all_close(ops::mean(a, 0), {2.5, 3.5, 4.5}));
  EXPECT_EQ(ops::sum(a, 1).shape(), (Shape{2}));
  EXPECT_EQ(ops::sum(a, 1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(ops::mean(a, 0, true).shape(), (Shape{1, 3}));
  Tensor s = ops::sum_all(a);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_DOUBLE_EQ(s.item(), 21);
  EXPECT_DOUBLE_EQ(ops::sum_all(a.transpose(0, 1).narrow(0, 1, 2)).item(), 2 + 5 + 3 + 6);
  EXPECT_TRUE(all_close(ops::sum(a.to(DType::f32), 1), {6, 15}, 1e-7));
}

TEST(OpsReduce, Gradcheck) {
  uint64_t seed = 1;
  for (Shape s : {Shape{1}, Shape{7}, Shape{3, 13}, Shape{2, 1, 7}, Shape{3, 5, 2}}) {
    for (int64_t d = -int64_t(s.size()); d < int64_t(s.size()); ++d)
      for (bool keep : {false, true}) {
        EXPECT_TRUE(gradcheck(
            [&](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{ops::sum(in[0], d, keep), ops::mean(in[0], d, keep)};
            },
            {rnd(s, seed++)}))
            << shape_str(s) << " dim " << d << " keepdim " << keep;
      }
    EXPECT_TRUE(gradcheck(
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::sum_all(in[0])}; },
        {rnd(s, seed++)}));
  }
}

TEST(OpsReduce, BadInput) {
  EXPECT_DL_ERROR(ops::sum(rnd({3, 4}, 1), 2), "[sum]", "dim 2", "rank 2");
  EXPECT_DL_ERROR(ops::mean(rnd({3, 4}, 1), -3), "[mean]", "dim -3");
  EXPECT_DL_ERROR(ops::mean(rnd({3, 0}, 1), 1), "[mean]", "empty");
  EXPECT_DL_ERROR(ops::sum_all(Tensor::zeros({3}, DType::i32)), "[sum_all]", "i32");
}

}  // namespace
}  // namespace driftless
