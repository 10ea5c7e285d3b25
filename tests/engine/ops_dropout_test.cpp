// dropout: the mask is a function of (seed, element index) only, kept elements are scaled
// by 1/(1-p), eval mode and p = 0 are the identity, and the gradient uses the same mask.
#include "engine/core/random.h"
#include "engine/ops/ops.h"
#include "tests/engine/ops_test_util.h"

namespace driftless {
namespace {

using testing::gradcheck;
using testing::rnd;

TEST(OpsDropout, MaskFromSeedAndScale) {
  const double p = 0.3;
  Tensor x = rnd({7, 13}, 1);
  Tensor y = ops::dropout(x, p, 42);
  int64_t dropped = 0;
  for (int64_t i = 0; i < 7; ++i)
    for (int64_t j = 0; j < 13; ++j) {
      const bool keep = random::uniform01(42, uint64_t(i * 13 + j)) >= p;
      dropped += !keep;
      EXPECT_DOUBLE_EQ(y.at({i, j}), keep ? x.at({i, j}) / (1 - p) : 0.0);
    }
  EXPECT_GT(dropped, 10);
  EXPECT_LT(dropped, 45);
  // Same seed, same mask (also for a strided input); another seed, another mask.
  EXPECT_TRUE(testing::all_close(ops::dropout(x, p, 42), y.to_vector<double>()));
  Tensor xt = x.transpose(0, 1).contiguous().transpose(0, 1);
  EXPECT_TRUE(testing::all_close(ops::dropout(xt, p, 42), y.to_vector<double>()));
  EXPECT_FALSE(testing::all_close(ops::dropout(x, p, 43), y.to_vector<double>()));
}

TEST(OpsDropout, IdentityWhenNotTraining) {
  Tensor x = rnd({3, 5}, 2);
  EXPECT_TRUE(testing::all_close(ops::dropout(x, 0.5, 1, false), x.to_vector<double>()));
  EXPECT_TRUE(testing::all_close(ops::dropout(x, 0.0, 1), x.to_vector<double>()));
  EXPECT_TRUE(testing::all_close(ops::dropout(x, 1.0, 1), std::vector<double>(15, 0.0)));
}

TEST(OpsDropout, Gradcheck) {
  for (Shape s : {Shape{1}, Shape{7}, Shape{3, 13}})
    for (double p : {0.1, 0.5})
      EXPECT_TRUE(gradcheck(
          [p](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{ops::dropout(in[0], p, 7)};
          },
          {rnd(s, 3)}))
          << shape_str(s) << " p " << p;
}

TEST(OpsDropout, BadInput) {
  EXPECT_DL_ERROR(ops::dropout(rnd({3}, 1), 1.5, 1), "[dropout]", "1.5");
  EXPECT_DL_ERROR(ops::dropout(rnd({3}, 1), -0.1, 1), "[dropout]", "-0.1");
  EXPECT_DL_ERROR(ops::dropout(Tensor::zeros({3}, DType::bf16), 0.1, 1), "[dropout]", "bf16");
}

}  // namespace
}  // namespace driftless
