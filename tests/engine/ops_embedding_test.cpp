// embedding: forward gathers rows, backward scatter-adds (repeated ids sum), gradients at
// odd shapes with i32 and i64 ids, out-of-range ids are an error.
#include "engine/ops/ops.h"
#include "tests/engine/ops_test_util.h"

namespace driftless {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::rnd;

TEST(OpsEmbedding, ForwardGathersRows) {
  Tensor w = Tensor::from_vector<double>({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor out = ops::embedding(w, Tensor::from_vector<int32_t>({2, 0, 2, 1}, {2, 2}));
  EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
  EXPECT_TRUE(all_close(out, {20, 21, 0, 1, 20, 21, 10, 11}));
}

TEST(OpsEmbedding, BackwardScatterAdds) {
  Tensor w = rnd({4, 3}, 1).set_requires_grad();
  Tensor out = ops::embedding(w, Tensor::from_vector<int64_t>({1, 3, 1, 1}));
  autograd::backward(ops::sum_all(out));
  EXPECT_TRUE(all_close(w.grad(), {0, 0, 0, 3, 3, 3, 0, 0, 0, 1, 1, 1}));
}

TEST(OpsEmbedding, Gradcheck) {
  uint64_t seed = 1;
  for (auto [v, c] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 3}, {13, 5}}) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 6; ++i) ids.push_back((i * 3 + 1) % v);
    std::vector<int32_t> ids32(ids.begin(), ids.end());
    for (const Tensor& t : {Tensor::from_vector(ids, {6}), Tensor::from_vector(ids32, {2, 3}),
                            Tensor::from_vector(ids, {3, 1, 2})})
      EXPECT_TRUE(gradcheck(
          [](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{ops::embedding(in[0], in[1])};
          },
          {rnd({v, c}, seed++), t}))
          << v << "x" << c << " ids " << shape_str(t.shape());
  }
}

TEST(OpsEmbedding, BadInput) {
  Tensor w = rnd({5, 3}, 1);
  EXPECT_DL_ERROR(ops::embedding(w, Tensor::from_vector<int64_t>({0, 5})), "[embedding]", "id 5",
                  "[5, 3]");
  EXPECT_DL_ERROR(ops::embedding(w, Tensor::from_vector<int32_t>({-1})), "[embedding]", "id -1");
  EXPECT_DL_ERROR(ops::embedding(w, Tensor::from_vector<double>({0})), "[embedding]", "ids", "f64");
  EXPECT_DL_ERROR(ops::embedding(rnd({5}, 1), Tensor::from_vector<int64_t>({0})), "[embedding]",
                  "[5]");
}

}  // namespace
}  // namespace driftless
