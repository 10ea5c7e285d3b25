// The LSE merge of context parallelism (layers/attention/lse_merge.h): its CUDA body against
// its CPU body (CONVENTIONS tier 2), f32 and bf16 parts, with rows that see no key in one part
// or in both (LSE -inf), merged into a prefix of the accumulator's rows.
#include <limits>

#include "layers/attention/lse_merge.h"
#include "tests/gpu/gpu_test_util.h"

namespace driftless::layers {
namespace {

TEST(LseMergeCuda, MatchesCpu) {
  DL_REQUIRE_GPU();
  const int64_t n = 37, rows = 29, H = 3, D = 64;
  const double inf = std::numeric_limits<double>::infinity();
  for (DType part_dtype : {DType::f32, DType::bf16}) {
    const uint64_t seed = testing::fresh_seed("lse_merge_cuda");
    Tensor acc = Tensor::randn({n, H, D}, seed), lse = Tensor::randn({H, n}, seed + 1);
    Tensor part = Tensor::randn({rows, H, D}, seed + 2), plse = Tensor::randn({H, rows}, seed + 3);
    // Row 0 sees no key in the part, row 1 none in the accumulator, row 2 none in either.
    for (int64_t h = 0; h < H; ++h) {
      plse.narrow(0, h, 1).narrow(1, 0, 1).fill_(-inf);
      lse.narrow(0, h, 1).narrow(1, 1, 2).fill_(-inf);
      plse.narrow(0, h, 1).narrow(1, 2, 1).fill_(-inf);
    }
    acc.narrow(0, 1, 2).zero_();  // what attention writes for rows that see nothing
    Tensor part_in =
        part_dtype == DType::bf16 ? part.to(Device::cuda, DType::bf16) : part.to(Device::cuda);
    Tensor acc_gpu = acc.to(Device::cuda), lse_gpu = lse.to(Device::cuda);
    lse_merge(acc_gpu, lse_gpu, part_in, plse.to(Device::cuda));
    // The CPU body on the same (rounded) part.
    lse_merge(acc, lse, part_in.to(Device::cpu, DType::f32), plse);
    const auto a = acc.to_vector<float>(), b = acc_gpu.to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(b[i], a[i], 1e-5 * (1 + std::abs(a[i]))) << i;
    const auto la = lse.to_vector<float>(), lb = lse_gpu.to_vector<float>();
    for (size_t i = 0; i < la.size(); ++i) {
      if (std::isinf(la[i])) {
        EXPECT_TRUE(std::isinf(lb[i]) && lb[i] < 0) << i;
      } else {
        EXPECT_NEAR(lb[i], la[i], 1e-5 * (1 + std::abs(la[i]))) << i;
      }
    }
    // A row with no key in either keeps out 0.
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(acc_gpu.to(Device::cpu).at({2, 0, d}), 0.0);
  }
}

}  // namespace
}  // namespace driftless::layers
