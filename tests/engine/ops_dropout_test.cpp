// dropout: the mask is a function of (seed, row id, column) only, so a row keeps its mask
// wherever it sits in the input; kept elements are scaled by 1/(1-p), eval mode and p = 0
// are the identity, and the gradient uses the same mask.
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

// The rows of a batch cut into pieces (a micro-sequence, another rank's chunk, the ring's
// two chunks) get the mask of the same rows of the whole batch when named by their ids.
TEST(OpsDropout, MaskFollowsRowIds) {
  const double p = 0.4;
  Tensor whole = rnd({10, 6}, 4);
  Tensor y = ops::dropout(whole, p, 9);
  // Rows 7..8 then rows 1..3, as one input of 5 rows.
  Tensor part = Tensor::empty({5, 6}, whole.dtype());
  part.narrow(0, 0, 2).copy_(whole.narrow(0, 7, 2));
  part.narrow(0, 2, 3).copy_(whole.narrow(0, 1, 3));
  Tensor yp = ops::dropout(part, p, 9, {{7, 2}, {1, 3}});
  for (int64_t j = 0; j < 6; ++j) {
    for (int64_t r = 0; r < 2; ++r) EXPECT_EQ(yp.at({r, j}), y.at({7 + r, j})) << r << " " << j;
    for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(yp.at({2 + r, j}), y.at({1 + r, j})) << r << " " << j;
  }
  // By local index the same piece draws another mask.
  EXPECT_FALSE(testing::all_close(ops::dropout(part, p, 9), yp.to_vector<double>()));
  // The gradient takes the same mask.
  EXPECT_TRUE(gradcheck(
      [p](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{ops::dropout(in[0], p, 9, {{7, 2}, {1, 3}})};
      },
      {rnd({5, 6}, 5)}));
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
  EXPECT_DL_ERROR(ops::dropout(rnd({4, 2}, 1), 0.1, 1, {{0, 3}}), "[dropout]", "cover 3 rows");
  EXPECT_DL_ERROR(ops::dropout(rnd({4, 2}, 1), 0.1, 1, {{-1, 4}}), "[dropout]", "first >= 0");
}

}  // namespace
}  // namespace driftless
