// Backends agree for the Llama block's ops (rms_norm, swiglu, rope; engine/ops/ops.h), as
// ops_cuda_test.cpp does for the others: CUDA forward and input gradients against the CPU
// within ops_check.h's tolerances, at odd shapes and at the shapes of the vectorised bf16
// kernels (rows of 16-byte units), each cuda run repeated bit for bit. Skips without a GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/ops/ops.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/ops_check.h"

namespace driftless {
namespace {

using namespace ops_check;

// x times factor, an f64 cpu tensor (inputs over a wider range than N(0, 1)).
Tensor scaled(const Tensor& x, double factor) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e *= factor;
  return Tensor::from_vector(v, x.shape());
}

TEST(OpsCuda, RmsNorm) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    auto fn = [](const auto& x) { return ops::rms_norm(x[0], x[1], 1e-6); };
    check("rms_norm", "(7,65)", fn, {rnd({7, 65}), rnd({65})}, dt);
    check("rms_norm", "(3,5,768)", fn, {rnd({3, 5, 768}), rnd({768})}, dt);
    // 200 rows: six whole chunks of 32 for the weight gradient's partials and a partial one.
    check("rms_norm", "(200,129) chunks", fn, {rnd({200, 129}), rnd({129})}, dt);
    // bf16 rows of 16-byte units (c % 8 == 0, c <= 1024): SmolLM2's width over six chunks and a
    // partial one, and the widest row the unit kernels hold (four units a lane).
    check("rms_norm", "(200,576) units", fn, {rnd({200, 576}), rnd({576})}, dt);
    check("rms_norm", "(37,1024) units", fn, {rnd({37, 1024}), rnd({1024})}, dt);
    // One element: dx = w g (1 - x^2 / (x^2 + eps)) / sqrt(x^2 + eps) is a difference of
    // two nearly equal terms unless eps is comparable with x^2; each backend then keeps only
    // eps / (x^2 + eps) of its precision (measured: f64 5.2e-12 apart at eps 1e-6, f32 3.7e-5
    // relative at eps 1e-2). eps 1 keeps the term >= 0.1 for |x| <= 3: inside both bounds.
    check(
        "rms_norm", "(1,1)", [](const auto& x) { return ops::rms_norm(x[0], x[1], 1.0); },
        {rnd({1, 1}), rnd({1})}, dt);
    check("rms_norm", "(9,4096)", fn, {rnd({9, 4096}), rnd({4096})}, dt);
    check(
        "rms_norm", "eps 0.5", [](const auto& x) { return ops::rms_norm(x[0], x[1], 0.5); },
        {rnd({13, 33}), rnd({33})}, dt);
    check(
        "rms_norm", "transposed view",
        [](const auto& x) { return ops::rms_norm(ops::transpose(x[0], 0, 1), x[1], 1e-6); },
        {rnd({65, 7}), rnd({65})}, dt);
  }
}

TEST(OpsCuda, Swiglu) {
  DL_REQUIRE_GPU();
  auto fn = [](const auto& x) { return ops::swiglu(x[0]); };
  for (DType dt : kDtypes) {
    check("swiglu", "(7,130)", fn, {rnd({7, 130})}, dt);
    check("swiglu", "(3,5,22)", fn, {rnd({3, 5, 22})}, dt);
    check("swiglu", "(1,2)", fn, {rnd({1, 2})}, dt);
    check("swiglu", "(129,5504)", fn, {rnd({129, 5504})}, dt);
    check("swiglu", "(33,3072) units", fn, {rnd({33, 3072})}, dt);  // SmolLM2-135M's 2 x 1536
    // Gates out to +-100: exp(-gate) overflows to inf, sigmoid to 0, without NaN.
    check("swiglu", "wide range", fn, {scaled(rnd({7, 64}), 30)}, dt);
    check(
        "swiglu", "transposed view",
        [](const auto& x) { return ops::swiglu(ops::transpose(x[0], 0, 1)); }, {rnd({10, 7})}, dt);
  }
}

TEST(OpsCuda, Rope) {
  DL_REQUIRE_GPU();
  auto pos = [](const std::vector<int32_t>& p) { return Tensor::from_vector(p); };
  // n positions drawn from [0, max] (a fresh seed each run).
  auto random_pos = [](int64_t n, int32_t max) {
    std::mt19937_64 g(testing::fresh_seed("ops_cuda"));
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& v : p) v = int32_t(g() % (uint64_t(max) + 1));
    return Tensor::from_vector(p);
  };
  auto fn = [](int64_t h, int64_t hkv, double theta) {
    return [=](const auto& x) { return ops::rope(x[0], x[1], h, hkv, theta); };
  };
  for (DType dt : kDtypes) {
    check("rope", "N5 H2 Hkv1 D6 restarts", fn(2, 1, 1e4), {rnd({5, 24}), pos({0, 1, 2, 0, 1})},
          dt);
    // Llama-like heads (H 8, H_kv 2, D 128) at positions up to 1e6: angles of 1e6 radians,
    // which only a full-range sincosf gets right.
    check("rope", "N129 H8 Hkv2 D128", fn(8, 2, 5e5), {rnd({129, 1536}), random_pos(129, 1000000)},
          dt);
    check("rope", "D2", fn(1, 1, 1e4), {rnd({3, 6}), pos({0, 7, 1000000})}, dt);
    check("rope", "D512", fn(1, 1, 1e4), {rnd({2, 1536}), pos({3, 999999})}, dt);
    check("rope", "MHA H3 D10", fn(3, 3, 1e4), {rnd({7, 90}), random_pos(7, 100)}, dt);
    // SmolLM2-135M's heads (H 9, H_kv 3, D 64: 16-byte units, a warp a row), 301 rows: a
    // partial last block of 8.
    check("rope", "N301 H9 Hkv3 D64", fn(9, 3, 1e5), {rnd({301, 960}), random_pos(301, 8191)}, dt);
    check("rope", "no rows", fn(2, 1, 1e4), {rnd({0, 24}), pos({})}, dt, false);
    // All positions 0: the identity, bit for bit.
    std::vector<Tensor> cpu_in, gpu_in;
    testing::inputs_for({rnd({5, 24}), pos({0, 0, 0, 0, 0})}, dt, cpu_in, gpu_in);
    EXPECT_EQ(ops::rope(gpu_in[0], gpu_in[1], 2, 1, 1e4).to_vector<double>(),
              gpu_in[0].to_vector<double>())
        << dtype_name(dt);
  }
  // The kernel's frequencies travel in the launch: head dims up to 512.
  Tensor wide = Tensor::zeros({1, 3 * 514}, DType::f32, Device::cuda);
  EXPECT_THROW(ops::rope(wide, pos({0}).to(Device::cuda), 1, 1, 1e4), Error);
}

}  // namespace
}  // namespace driftless
