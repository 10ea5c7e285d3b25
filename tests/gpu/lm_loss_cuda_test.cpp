// Backends agree for the chunked, fused LM head and cross-entropy (layers/lm_loss.h) on cuda:
// f32, bf16 and f64 against the CPU, gradients into f32 storage, and the chunking's memory
// bound. Harness: fused_check.h. Skips when no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd/autograd.h"
#include "engine/core/allocator.h"
#include "layers/lm_loss.h"
#include "tests/gpu/fused_check.h"
#include "tests/gpu/gpu_test_util.h"

namespace driftless::layers {
namespace {

using namespace fused_test;

Tensor labels_for(int64_t t, int64_t v) {
  Tensor r = Tensor::uniform({t}, testing::fresh_seed("fused_cuda"), 0, double(v));
  std::vector<int64_t> l(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) l[size_t(i)] = std::min<int64_t>(int64_t(r.at({i})), v - 1);
  return Tensor::from_vector(l);
}

Tensor mask_for(int64_t t) {
  std::vector<double> m(size_t(t), 1.0);
  for (int64_t i = 1; i < t; i += 3) m[size_t(i)] = 0.0;
  return Tensor::from_vector(m);
}

// bf16 lm_loss gradients, FlashAttention's criterion: at most twice the error (against the
// f32 CPU reference) of the same computation in float64 that rounds dlogits to bf16 where
// the kernel does, plus 1e-5 for the fp32 summation orders. A fixed bound does not fit:
// with peaked softmax rows a dW entry sums O(1) terms of both signs, so one rounding of
// each term is amplified by the cancellation (measured up to 1.6e-2 on some seeds).
std::vector<double> lm_loss_bf16_tols(const std::vector<Tensor>& in, const Tensor& cot,
                                      const Result& ref, double loss_scale) {
  const Tensor x = in[0].to(DType::f64), w = in[1].to(DType::f64), mask = in[3].to(DType::f64);
  const int64_t t = x.size(0), c = x.size(1), v = w.size(0);
  const std::vector<double> xs = x.to_vector<double>(), ws = w.to_vector<double>(),
                            ms = mask.to_vector<double>();
  const std::vector<int64_t> labels = in[2].to(DType::i64).to_vector<int64_t>();
  const double up = cot.to(DType::f64).item();
  std::vector<double> d(size_t(t * v)), dx(size_t(t * c), 0.0), dw(size_t(v * c), 0.0);
  for (int64_t i = 0; i < t; ++i) {
    std::vector<double> z(static_cast<size_t>(v));
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < v; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < c; ++k) acc += xs[size_t(i * c + k)] * ws[size_t(j * c + k)];
      z[size_t(j)] = acc;
      mx = std::max(mx, acc);
    }
    for (double zj : z) sum += std::exp(zj - mx);
    for (int64_t j = 0; j < v; ++j)
      d[size_t(i * v + j)] = (std::exp(z[size_t(j)] - mx) / sum - (labels[size_t(i)] == j)) *
                             ms[size_t(i)] * loss_scale;
  }
  const std::vector<double> db =
      Tensor::from_vector(d).to(DType::bf16).to(DType::f64).to_vector<double>();
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < v; ++j)
      for (int64_t k = 0; k < c; ++k) {
        dx[size_t(i * c + k)] += up * db[size_t(i * v + j)] * ws[size_t(j * c + k)];
        dw[size_t(j * c + k)] += up * db[size_t(i * v + j)] * xs[size_t(i * c + k)];
      }
  // The gradients come back in the inputs' dtype (bf16): round the emulation the same way.
  auto emulated = [](const std::vector<double>& g, const Tensor& like) {
    return Tensor::from_vector(g).view(like.shape()).to(DType::bf16).to(DType::f64);
  };
  return {2 * max_err(emulated(dx, ref.grads[0]), ref.grads[0]) + 1e-5,
          2 * max_err(emulated(dw, ref.grads[1]), ref.grads[1]) + 1e-5};
}

TEST(FusedCuda, LmLoss) {
  DL_REQUIRE_GPU();
  struct Case {
    int64_t t, c, v, chunk;
  };
  // T, C and V of 64 or more that are not multiples of 8 (150, 70, 203) make every GEMM of
  // the chunk run as an aligned main product plus leftover rows, columns and contraction
  // terms (gemm_f32_out): each split is checked against the CPU here.
  const Case cases[] = {{37, 24, 101, 8},   {37, 24, 101, 0},   {1, 16, 64, 1},
                        {130, 32, 257, 64}, {200, 64, 512, 48}, {150, 70, 203, 0},
                        {150, 70, 203, 72}};
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (Case k : cases) {
      const std::string tag = "T" + std::to_string(k.t) + " C" + std::to_string(k.c) + " V" +
                              std::to_string(k.v) + " chunk" + std::to_string(k.chunk);
      const DType out_dt = dt == DType::f64 ? DType::f64 : DType::f32;
      // The mask goes in as a float input: lm_loss gives it no gradient.
      check(
          "lm_loss", tag,
          [chunk = k.chunk](const auto& x) { return lm_loss(x[0], x[1], x[2], x[3], 0.3, chunk); },
          {rnd({k.t, k.c}), rnd({k.v, k.c}, 0.5), labels_for(k.t, k.v), mask_for(k.t)}, dt, out_dt,
          dt == DType::bf16 ? GradTols([](const auto& in, const Tensor& cot, const Result& ref) {
            return lm_loss_bf16_tols(in, cot, ref, 0.3);
          })
                            : GradTols());
    }
}

// The tied weight's gradient scaled by the upstream gradient straight into its f32 storage
// (ops::gpu::scaled_into, the scale read on the device), and dx scaled and rounded in one
// pass; in bf16 within the same emulated bound as through the compute dtype.
TEST(FusedCuda, LmLossGradsIntoF32Storage) {
  DL_REQUIRE_GPU();
  const int64_t t = 150, c = 64, v = 203;
  const Tensor labels = labels_for(t, v), mask = mask_for(t);
  auto fn = [labels, mask](const auto& x) { return lm_loss(x[0], x[1], labels, mask, 0.3, 48); };
  for (DType dt : {DType::f32, DType::bf16})
    check_into_f32_grads(
        "lm_loss", "T150 C64 V203", fn, {rnd({t, c}), rnd({v, c}, 0.5)}, dt, 1e-5,
        dt == DType::bf16 ? GradTols([&](const auto& in, const Tensor& cot, const Result& ref) {
          return lm_loss_bf16_tols({in[0], in[1], labels, mask}, cot, ref, 0.3);
        })
                          : GradTols());
}

TEST(FusedCuda, LmLossNeverHoldsTheWholeLogits) {
  DL_REQUIRE_GPU();
  const int64_t t = 1024, c = 32, v = 4096, chunk = 32;
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = rnd({t, c}).to(Device::cuda, dt).set_requires_grad(true);
    Tensor w = rnd({v, c}, 0.5).to(Device::cuda, dt).set_requires_grad(true);
    Tensor labels = labels_for(t, v), mask = mask_for(t);
    const size_t whole = size_t(t * v) * sizeof(float);  // 16 MiB of fp32 logits
    auto peak_of = [&](int64_t rows) {
      const size_t before = memory_stats(Device::cuda).bytes_in_use;
      reset_peak_memory(Device::cuda);
      Tensor loss = lm_loss(x, w, labels, mask, 1.0, rows);
      const size_t peak = memory_stats(Device::cuda).peak_bytes_in_use - before;
      EXPECT_EQ(loss.dtype(), DType::f32);
      autograd::backward(loss);
      EXPECT_EQ(x.grad().dtype(), dt);
      EXPECT_EQ(w.grad().dtype(), dt);
      return peak;
    };
    // dW (512 KiB), dx (128 KiB) and per chunk logits, dlogits and the bf16 copy
    // (3 x 512 KiB at most), plus small vectors: about 2.5 MiB.
    const size_t chunked = peak_of(chunk);
    EXPECT_LT(chunked, whole / 4) << "peak " << chunked << " bytes vs whole logits " << whole;
    // The measurement sees logits: one chunk of all T rows holds them whole.
    EXPECT_GE(peak_of(t), whole);
  }
}

}  // namespace
}  // namespace driftless::layers
