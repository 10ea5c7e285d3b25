// Backends agree (CONTRIBUTING.md tier 2) for the generic ops (engine/ops/ops.h): every op's
// CUDA result, forward and input gradients (autograd::backward on both devices with the
// same cotangent), equals its CPU result within the tolerance of ops_check.h's table, on
// fresh random inputs (the seed is printed) at odd shapes. Outputs come from cache blocks
// poisoned with NaN, so an element a kernel forgets to write shows. Each CUDA computation
// runs twice and must repeat bit for bit. Also gradient clipping on cuda (AdamW:
// optim_cuda_test.cpp; the Llama ops: ops_llama_cuda_test.cpp). Skips when no GPU is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/device_ops.h"
#include "engine/core/tensor.h"
#include "engine/ops/cuda/backend.h"
#include "engine/ops/ops.h"
#include "engine/optim/clip.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/gpu/ops_check.h"

namespace driftless {
namespace {

using namespace ops_check;


TEST(OpsCuda, Matmul) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        auto fn = [=](const auto& x) { return ops::matmul(x[0], x[1], ta, tb); };
        auto mat = [](int64_t r, int64_t c, bool t) { return t ? rnd({c, r}) : rnd({r, c}); };
        const std::string tag = std::string(ta ? "T" : "N") + (tb ? "T" : "N");
        check("matmul", tag + " 7x129x65", fn, {mat(7, 129, ta), mat(129, 65, tb)}, dt);
        check("matmul", tag + " 1x1x1", fn, {mat(1, 1, ta), mat(1, 1, tb)}, dt);
        check("matmul", tag + " 1x65x1", fn, {mat(1, 65, ta), mat(65, 1, tb)}, dt);
        // Batched, both operands 3-D.
        Tensor a3 = ta ? rnd({3, 13, 7}) : rnd({3, 7, 13});
        Tensor b3 = tb ? rnd({3, 5, 13}) : rnd({3, 13, 5});
        check("matmul", tag + " batched", fn, {a3, b3}, dt);
        // 2-D b broadcast over a's batch (folded into M when !ta), and 2-D a over b's.
        Tensor a4 = ta ? rnd({2, 3, 13, 7}) : rnd({2, 3, 7, 13});
        check("matmul", tag + " b broadcast", fn, {a4, mat(13, 65, tb)}, dt);
        check("matmul", tag + " a broadcast", fn, {mat(7, 13, ta), b3}, dt);
      }
    check(
        "matmul", "K=0", [](const auto& x) { return ops::matmul(x[0], x[1]); },
        {rnd({5, 0}), rnd({0, 3})}, dt, false);
    check(
        "matmul", "non-contiguous",
        [](const auto& x) { return ops::matmul(ops::transpose(x[0], 0, 1), x[1]); },
        {rnd({65, 7}), rnd({65, 33})}, dt);
  }
}

TEST(OpsCuda, Elementwise) {
  DL_REQUIRE_GPU();
  struct Bin {
    const char* op;
    Tensor (*fn)(const Tensor&, const Tensor&);
  };
  const Bin bins[] = {{"add", ops::add}, {"sub", ops::sub}, {"mul", ops::mul}};
  for (DType dt : kDtypes) {
    for (const Bin& bin : bins) {
      auto fn = [f = bin.fn](const auto& x) { return f(x[0], x[1]); };
      check(bin.op, "same shape", fn, {rnd({7, 129}), rnd({7, 129})}, dt);
      check(bin.op, "bias row", fn, {rnd({65, 129}), rnd({129})}, dt);
      check(bin.op, "general broadcast", fn, {rnd({7, 1, 5}), rnd({1, 3, 1})}, dt);
      // Gradients of the [1] / zero-dim operands sum 455 / 13 positive terms (signed ones
      // cancelled: bf16 0.0170 > 0.016 with seed 3695720032744581356).
      check(bin.op, "scalar-like", fn, {rnd({1}), testing::positive(rnd({7, 65}))}, dt, true, true);
      check(bin.op, "zero-dim", fn, {rnd({}), testing::positive(rnd({13}))}, dt, true, true);
      check(
          bin.op, "transposed view",
          [f = bin.fn](const auto& x) { return f(ops::transpose(x[0], 0, 1), x[1]); },
          {rnd({129, 7}), rnd({7, 129})}, dt);
      check(bin.op, "large", fn, {rnd({65537}), rnd({65537})}, dt);
    }
    for (const Shape& s : {Shape{7, 129}, Shape{1}, Shape{3, 5, 7}}) {
      const std::string tag = shape_str(s);
      check(
          "scale", tag, [](const auto& x) { return ops::scale(x[0], -0.37); }, {rnd(s)}, dt);
      check(
          "add_scalar", tag, [](const auto& x) { return ops::add_scalar(x[0], 1.7); }, {rnd(s)},
          dt);
      check(
          "neg", tag, [](const auto& x) { return ops::neg(x[0]); }, {rnd(s)}, dt);
      check(
          "gelu", tag, [](const auto& x) { return ops::gelu(x[0]); }, {rnd(s)}, dt);
    }
    check(
        "scale", "transposed view",
        [](const auto& x) { return ops::scale(ops::transpose(x[0], 0, 1), 3.0); }, {rnd({13, 7})},
        dt);
    check(
        "gelu", "large", [](const auto& x) { return ops::gelu(x[0]); }, {rnd({65537})}, dt);
    check(
        "gelu", "transposed view",
        [](const auto& x) { return ops::gelu(ops::transpose(x[0], 0, 1)); }, {rnd({13, 7})}, dt);
    check(
        "broadcast_to", "(1,5)->(7,3,5)",
        [](const auto& x) {
          return ops::broadcast_to(x[0], {7, 3, 5});
        },
        {rnd({1, 5})}, dt);
    check(
        "sum_to", "(7,3,5)->(3,1)",
        [](const auto& x) {
          return ops::sum_to(x[0], {3, 1});
        },
        {rnd({7, 3, 5})}, dt);
    check(
        "sum_to", "(2000,3)->(3)", [](const auto& x) { return ops::sum_to(x[0], {3}); },
        {rnd({2000, 3})}, dt);
    check(
        "sum_to", "(5,4000)->(5,1)",
        [](const auto& x) {
          return ops::sum_to(x[0], {5, 1});
        },
        {rnd({5, 4000})}, dt);
  }
}

TEST(OpsCuda, Reductions) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (int64_t d : {0, 1, 2, -1})
      for (bool keep : {false, true}) {
        const std::string tag = "dim " + std::to_string(d) + (keep ? " keepdim" : "");
        check(
            "sum", tag, [=](const auto& x) { return ops::sum(x[0], d, keep); }, {rnd({7, 65, 3})},
            dt);
        check(
            "mean", tag, [=](const auto& x) { return ops::mean(x[0], d, keep); }, {rnd({7, 65, 3})},
            dt);
      }
    check(
        "sum", "size-1 dim", [](const auto& x) { return ops::sum(x[0], 1); }, {rnd({7, 1, 5})}, dt);
    check(
        "sum", "long rows", [](const auto& x) { return ops::sum(x[0], 1); }, {rnd({3, 100003})},
        dt);
    check(
        "mean", "many columns", [](const auto& x) { return ops::mean(x[0], 0); },
        {rnd({129, 2049})}, dt);
    // Few adjacent outputs, long sums: the chunked two-pass reduction (a bias gradient),
    // with a last chunk shorter than the others.
    check(
        "sum", "bias gradient", [](const auto& x) { return ops::sum(x[0], 0); }, {rnd({4099, 773})},
        dt);
    check(
        "sum", "two kept dims", [](const auto& x) { return ops::sum(x[0], 0); }, {rnd({600, 5, 9})},
        dt);
    check(
        "mean", "transposed view",
        [](const auto& x) { return ops::mean(ops::transpose(x[0], 0, 1), 1); }, {rnd({65, 7})}, dt);
    for (const Shape& s : {Shape{}, Shape{1}, Shape{129, 65}, Shape{(1 << 20) + 7}})
      check(
          "sum_all", shape_str(s), [](const auto& x) { return ops::sum_all(x[0]); }, {rnd(s)}, dt);
  }
}

TEST(OpsCuda, LayerNorm) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    auto affine = [](const auto& x) { return ops::layer_norm(x[0], x[1], x[2]); };
    auto no_affine = [](const auto& x) { return ops::layer_norm(x[0], Tensor(), Tensor()); };
    auto weight_only = [](const auto& x) { return ops::layer_norm(x[0], x[1], Tensor()); };
    check("layer_norm", "(7,65)", affine, {rnd({7, 65}), rnd({65}), rnd({65})}, dt);
    check("layer_norm", "(3,5,768)", affine, {rnd({3, 5, 768}), rnd({768}), rnd({768})}, dt);
    check("layer_norm", "(200,129) chunks", affine, {rnd({200, 129}), rnd({129}), rnd({129})}, dt);
    check("layer_norm", "(1,1)", affine, {rnd({1, 1}), rnd({1}), rnd({1})}, dt);
    // Widths of whole 16-byte packs per lane take the register kernels (1, 4 and 8 packs of
    // bf16; 2048 f32 is past their limit and takes the scalar ones).
    check("layer_norm", "(9,2048)", affine, {rnd({9, 2048}), rnd({2048}), rnd({2048})}, dt);
    check("layer_norm", "(70,256) no affine", no_affine, {rnd({70, 256})}, dt);
    check("layer_norm", "(5,1024) weight only", weight_only, {rnd({5, 1024}), rnd({1024})}, dt);
    check("layer_norm", "no affine", no_affine, {rnd({129, 7})}, dt);
    check("layer_norm", "weight only", weight_only, {rnd({13, 33}), rnd({33})}, dt);
  }
}

TEST(OpsCuda, Softmax) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (const char* op : {"softmax", "log_softmax"}) {
      const bool log = std::string(op) == "log_softmax";
      auto at = [log](int64_t d) {
        return [log, d](const auto& x) {
          return log ? ops::log_softmax(x[0], d) : ops::softmax(x[0], d);
        };
      };
      check(op, "(7,129) dim -1", at(-1), {rnd({7, 129})}, dt);
      check(op, "(13,7) dim 0", at(0), {rnd({13, 7})}, dt);
      check(op, "(3,65,5) dim 1", at(1), {rnd({3, 65, 5})}, dt);
      check(op, "(1,1)", at(-1), {rnd({1, 1})}, dt);
      check(op, "(3,5000) dim -1", at(-1), {rnd({3, 5000})}, dt);
    }
  }
}

TEST(OpsCuda, CrossEntropy) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (int64_t v : {1, 7, 129, 50257}) {
      const int64_t n = v == 50257 ? 65 : 13;
      std::vector<int64_t> t(static_cast<size_t>(n));
      std::mt19937_64 g(testing::fresh_seed("ops_cuda"));
      for (auto& x : t) x = int64_t(g() % uint64_t(v));
      Tensor mask = Tensor::uniform({n}, testing::fresh_seed("ops_cuda"), 0, 1, DType::f64);
      mask.narrow(0, 1, 2).zero_();  // masked rows get no gradient
      const std::string tag = "V=" + std::to_string(v);
      check(
          "cross_entropy", tag + " mask",
          [](const auto& x) { return ops::cross_entropy(x[0], x[1], x[2]); },
          {rnd({n, v}), Tensor::from_vector(t), mask}, dt);
      check(
          "cross_entropy", tag + " no mask i32",
          [](const auto& x) { return ops::cross_entropy(x[0], x[1]); },
          {rnd({n, v}), Tensor::from_vector(t).to(DType::i32)}, dt);
    }
  }
}

// The fused loss + dlogits kernel (lm_loss's path) gives bitwise what the separate forward
// and backward kernels give: f32 logits with f32 and bf16 dlogits, rows padded to a multiple
// of 64 (the 16-byte path, with a v % 4 tail) and unpadded odd rows (the scalar path).
TEST(OpsCuda, CrossEntropyForwardBackwardMatchesTheSeparateKernels) {
  DL_REQUIRE_GPU();
  for (int64_t v : {1, 7, 129, 50257})
    for (bool padded : {true, false})
      for (DType gdt : {DType::f32, DType::bf16}) {
        SCOPED_TRACE("V=" + std::to_string(v) + (padded ? " padded" : "") + " " + dtype_name(gdt));
        const int64_t n = 37, ld = padded ? (v + 63) / 64 * 64 : v;
        Tensor logits = ops::mul(rnd({n, ld}), Tensor::full({}, 3.0, DType::f64))
                            .to(Device::cuda, DType::f32)
                            .narrow(1, 0, v);
        std::vector<int64_t> t(static_cast<size_t>(n));
        std::mt19937_64 g(testing::fresh_seed("ops_cuda"));
        for (auto& x : t) x = int64_t(g() % uint64_t(v));
        Tensor targets = Tensor::from_vector(t).to(Device::cuda);
        Tensor mask = Tensor::uniform({n}, testing::fresh_seed("ops_cuda"), 0, 1, DType::f32);
        mask.narrow(0, 1, 2).zero_();
        mask = mask.to(Device::cuda);
        Tensor go = Tensor::full({}, 0.37, DType::f32, Device::cuda);
        std::vector<Tensor> f = ops::gpu::cross_entropy_forward(logits, targets, mask);
        Tensor d = ops::gpu::cross_entropy_backward(go, logits, f[1], targets, mask, false, gdt)[0];
        std::vector<Tensor> fb =
            ops::gpu::cross_entropy_forward_backward(go, logits, targets, mask, gdt);
        EXPECT_EQ(fb[0].to_vector<double>(), f[0].to_vector<double>()) << "loss";
        ASSERT_EQ(fb[1].shape(), d.shape());
        EXPECT_EQ(fb[1].dtype(), gdt);
        EXPECT_EQ(fb[1].to_vector<double>(), d.to_vector<double>()) << "dlogits";
      }
}

TEST(OpsCuda, Embedding) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    auto fn = [](const auto& x) { return ops::embedding(x[0], x[1]); };
    std::vector<int64_t> ids = {3, 0, 128, 3, 3, 7, 0};  // repeats sum in the backward
    check("embedding", "(129,65) ids(7)", fn, {rnd({129, 65}), Tensor::from_vector(ids)}, dt);
    check("embedding", "ids (3,5) i32", fn,
          {rnd({13, 7}),
           Tensor::from_vector(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 12, 1, 1, 0},
                               {3, 5})},
          dt);
    std::vector<int64_t> many(4099);
    std::mt19937_64 g(testing::fresh_seed("ops_cuda"));
    for (auto& x : many) x = int64_t(g() % 50);
    check("embedding", "(50,768) ids(4099)", fn, {rnd({50, 768}), Tensor::from_vector(many)}, dt);
  }
}

TEST(OpsCuda, ShapeOps) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    check(
        "shape", "concat dim 1",
        [](const auto& x) {
          return ops::concat({x[0], x[1], x[2]}, 1);
        },
        {rnd({7, 1, 5}), rnd({7, 65, 5}), rnd({7, 3, 5})}, dt);
    check(
        "shape", "split + concat",
        [](const auto& x) {
          auto p = ops::split(x[0], {1, 7, 0, 57}, 0);
          return ops::concat({p[3], p[1], p[0], p[2]}, 0);
        },
        {rnd({65, 3})}, dt);
    check(
        "shape", "narrow", [](const auto& x) { return ops::narrow(x[0], 1, 2, 5); }, {rnd({7, 13})},
        dt);
    check(
        "shape", "reshape of a view",
        [](const auto& x) { return ops::reshape(ops::transpose(x[0], 0, 1), {-1}); },
        {rnd({7, 13})}, dt);
    check(
        "shape", "permute + contiguous",
        [](const auto& x) {
          return ops::contiguous(ops::permute(x[0], {2, 0, 1}));
        },
        {rnd({3, 5, 7})}, dt);
  }
}

TEST(OpsCuda, Dropout) {
  DL_REQUIRE_GPU();
  for (DType dt : kDtypes) {
    for (double p : {0.0, 0.3, 1.0}) {
      const std::string tag = "p=" + std::to_string(p);
      check(
          "dropout", tag, [p](const auto& x) { return ops::dropout(x[0], p, 1234); },
          {rnd({7, 129})}, dt);
      check(
          "dropout", tag + " transposed",
          [p](const auto& x) { return ops::dropout(ops::transpose(x[0], 0, 1), p, 99); },
          {rnd({13, 7})}, dt);
      // Rows named by global ids (the model's layout-independent masks): the device
      // draws the CPU's mask for the same ids.
      check(
          "dropout", tag + " row ids",
          [p](const auto& x) {
            return ops::dropout(x[0], p, 7, {{1000, 3}, {5, 6}});
          },
          {rnd({9, 65})}, dt);
    }
  }
}

TEST(OpsCuda, ClipGradNorm) {
  DL_REQUIRE_GPU();
  for (int64_t n : {int64_t(1), int64_t(129), int64_t(3) << 20}) {
    for (DType dt : {DType::f32, DType::f64}) {
      Tensor g_cpu = Tensor::randn({n}, testing::fresh_seed("ops_cuda"), dt);
      Tensor g_gpu = g_cpu.to(Device::cuda);
      const double sq_cpu = optim::grad_norm_squared(g_cpu);
      const double sq_gpu = optim::grad_norm_squared(g_gpu);
      std::printf("[ops_cuda] grad_norm_sq  %-4s n=%lld rel_err %.3g\n", dtype_name(dt),
                  (long long)n, std::abs(sq_gpu - sq_cpu) / sq_cpu);
      EXPECT_NEAR(sq_gpu, sq_cpu, 1e-10 * sq_cpu) << "n=" << n;  // both in double
      EXPECT_EQ(optim::grad_norm_squared(g_gpu), sq_gpu) << "not reproducible";
      const double norm_cpu = optim::clip_grad_norm(g_cpu, 0.5);
      const double norm_gpu = optim::clip_grad_norm(g_gpu, 0.5);
      EXPECT_NEAR(norm_gpu, norm_cpu, 1e-10 * norm_cpu);
      // Same double norm in, same T(factor) multiply: equal unless the norms' last bits
      // differ, which moves the factor by at most an ulp.
      const double e = max_err(g_gpu, g_cpu);
      EXPECT_LE(e, 1e-6) << "scaled gradients";
    }
  }
}

TEST(OpsCuda, EmbeddingTakesHostIdsForACudaWeight) {
  // The model passes token ids from the host (no device-to-host sync per call); the result
  // and the gradient equal those with ids on the device.
  DL_REQUIRE_GPU();
  Tensor w = Tensor::randn({97, 24}, 11).to(Device::cuda);
  w.set_requires_grad(true);
  Tensor ids = Tensor::from_vector<int32_t>({3, 96, 0, 3, 41});
  Tensor a = ops::embedding(w, ids), b = ops::embedding(w, ids.to(Device::cuda));
  EXPECT_EQ(a.device(), Device::cuda);
  EXPECT_EQ(a.to(Device::cpu).to_vector<float>(), b.to(Device::cpu).to_vector<float>());
  autograd::backward(ops::sum_all(a));
  const std::vector<float> g = w.grad().to(Device::cpu).to_vector<float>();
  EXPECT_EQ(g[3 * 24], 2.0f);  // id 3 twice
  EXPECT_EQ(g[1 * 24], 0.0f);
}

}  // namespace
}  // namespace driftless
