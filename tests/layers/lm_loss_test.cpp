// lm_loss (layers/lm_loss.h) on CPU: float64 central differences for x and the tied weight
// (tier 1); the chunked node equals the unchunked cross_entropy(matmul) to 1e-6 in f32 at
// chunk sizes that do not divide T, with masked rows and T = 1; the upstream gradient
// scales; evaluation records nothing; and the logits really are never whole: the
// allocator's peak stays far below one (T, V) tensor.
#include "layers/lm_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/autograd/autograd.h"
#include "engine/core/allocator.h"
#include "engine/ops/ops.h"
#include "tests/gradcheck.h"

namespace driftless::layers {
namespace {

Tensor labels_for(int64_t t, int64_t v, uint64_t seed) {
  Tensor r = Tensor::uniform({t}, seed, 0, double(v));
  std::vector<int64_t> l(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) l[size_t(i)] = std::min<int64_t>(int64_t(r.at({i})), v - 1);
  return Tensor::from_vector(l);
}

// Every third row masked out (row 1, 4, ...), the rest weight 1.
Tensor mask_for(int64_t t, DType dt) {
  std::vector<double> m(size_t(t), 1.0);
  for (int64_t i = 1; i < t; i += 3) m[size_t(i)] = 0.0;
  return Tensor::from_vector(m).to(dt);
}

// max |a - b| / max |b|: the relative error of a whole tensor.
double rel_err(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    num = std::max(num, std::abs(x[i] - y[i]));
    den = std::max(den, std::abs(y[i]));
  }
  return num / std::max(den, 1e-300);
}

TEST(LmLoss, GradcheckF64WithChunksMaskAndScale) {
  struct Case {
    int64_t t, c, v, chunk;
  };
  uint64_t seed = 100;
  for (Case k : {Case{5, 3, 7, 2}, Case{5, 3, 7, 0}, Case{1, 4, 6, 1}, Case{6, 2, 5, 4}}) {
    SCOPED_TRACE("T=" + std::to_string(k.t) + " C=" + std::to_string(k.c) +
                 " V=" + std::to_string(k.v) + " chunk=" + std::to_string(k.chunk));
    Tensor labels = labels_for(k.t, k.v, ++seed), mask = mask_for(k.t, DType::f64);
    auto f = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{lm_loss(in[0], in[1], labels, mask, 0.37, k.chunk)};
    };
    EXPECT_TRUE(testing::gradcheck(f, {Tensor::randn({k.t, k.c}, ++seed, DType::f64),
                                       Tensor::randn({k.v, k.c}, ++seed, DType::f64)}));
  }
}

struct Pass {
  Tensor loss, dx, dw;
};

Pass run_pass(const Tensor& x0, const Tensor& w0, const Tensor& labels, const Tensor& mask,
              double scale, int64_t chunk, bool reference, double upstream = 1.0,
              bool recompute = false) {
  Tensor x = x0.clone(), w = w0.clone();
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  Tensor loss =
      reference
          ? ops::scale(ops::cross_entropy(ops::matmul(x, w, false, true), labels, mask), scale)
          : lm_loss(x, w, labels, mask, scale, chunk, recompute);
  autograd::backward(loss, Tensor::full({}, upstream, loss.dtype()));
  return {loss.detach(), x.grad(), w.grad()};
}

TEST(LmLoss, ChunkedEqualsUnchunkedCrossEntropyF32) {
  struct Case {
    int64_t t, c, v;
  };
  uint64_t seed = 200;
  for (Case k : {Case{10, 8, 33}, Case{1, 8, 33}, Case{17, 5, 64}}) {
    Tensor x = Tensor::randn({k.t, k.c}, ++seed), w = Tensor::randn({k.v, k.c}, ++seed);
    Tensor labels = labels_for(k.t, k.v, ++seed), mask = mask_for(k.t, DType::f32);
    Pass ref = run_pass(x, w, labels, mask, 0.25, 0, true);
    for (int64_t chunk :
         {int64_t(1), int64_t(3), int64_t(4), int64_t(7), k.t, k.t + 5, int64_t(0)}) {
      SCOPED_TRACE("T=" + std::to_string(k.t) + " chunk=" + std::to_string(chunk));
      Pass p = run_pass(x, w, labels, mask, 0.25, chunk, false);
      EXPECT_EQ(p.loss.dtype(), DType::f32);
      EXPECT_LE(rel_err(p.loss, ref.loss), 1e-6);
      EXPECT_LE(rel_err(p.dx, ref.dx), 1e-6);
      EXPECT_LE(rel_err(p.dw, ref.dw), 1e-6);
    }
  }
}

TEST(LmLoss, MaskedRowsGetNoGradientAndUnmaskedDefaultsToOnes) {
  const int64_t t = 7, c = 4, v = 9;
  Tensor x = Tensor::randn({t, c}, 301), w = Tensor::randn({v, c}, 302);
  Tensor labels = labels_for(t, v, 303);
  Pass p = run_pass(x, w, labels, mask_for(t, DType::f32), 1.0, 2, false);
  for (int64_t i = 1; i < t; i += 3)
    for (int64_t j = 0; j < c; ++j) EXPECT_EQ(p.dx.at({i, j}), 0.0) << "masked row " << i;
  Pass all = run_pass(x, w, labels, Tensor(), 1.0, 2, false);
  Pass ones = run_pass(x, w, labels, Tensor::ones({t}), 1.0, 3, false);
  EXPECT_LE(rel_err(all.loss, ones.loss), 1e-6);
  EXPECT_LE(rel_err(all.dw, ones.dw), 1e-6);
  EXPECT_GT(all.loss.item(), p.loss.item());
}

TEST(LmLoss, UpstreamGradientScalesTheSavedGradients) {
  const int64_t t = 6, c = 3, v = 11;
  Tensor x = Tensor::randn({t, c}, 401), w = Tensor::randn({v, c}, 402);
  Tensor labels = labels_for(t, v, 403), mask = mask_for(t, DType::f32);
  Pass one = run_pass(x, w, labels, mask, 0.5, 4, false, 1.0);
  Pass two = run_pass(x, w, labels, mask, 0.5, 4, false, -2.5);
  EXPECT_LE(rel_err(two.dx, ops::scale(one.dx, -2.5)), 1e-6);
  EXPECT_LE(rel_err(two.dw, ops::scale(one.dw, -2.5)), 1e-6);
}

TEST(LmLoss, EvaluationComputesTheLossOnlyAndRecordsNothing) {
  const int64_t t = 9, c = 4, v = 13;
  Tensor x = Tensor::randn({t, c}, 501).set_requires_grad(true);
  Tensor w = Tensor::randn({v, c}, 502).set_requires_grad(true);
  Tensor labels = labels_for(t, v, 503), mask = mask_for(t, DType::f32);
  Tensor train = lm_loss(x, w, labels, mask, 0.1, 4);
  EXPECT_NE(train.grad_fn(), nullptr);
  autograd::NoGradGuard no_grad;
  Tensor eval = lm_loss(x, w, labels, mask, 0.1, 4);
  EXPECT_EQ(eval.grad_fn(), nullptr);
  EXPECT_EQ(eval.item(), train.item());
}

TEST(LmLoss, GradientOnlyForWhatRequiresIt) {
  const int64_t t = 5, c = 3, v = 8;
  Tensor x = Tensor::randn({t, c}, 601), w = Tensor::randn({v, c}, 602);
  w.set_requires_grad(true);
  Tensor labels = labels_for(t, v, 603);
  autograd::backward(lm_loss(x, w, labels, Tensor(), 1.0, 2));
  EXPECT_FALSE(x.grad().defined());
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().shape(), (Shape{v, c}));
}

TEST(LmLoss, RecomputeGivesTheSameLossAndGradientsAndSavesNoGradients) {
  const int64_t t = 13, c = 6, v = 40;
  Tensor x = Tensor::randn({t, c}, 801), w = Tensor::randn({v, c}, 802);
  Tensor labels = labels_for(t, v, 803), mask = mask_for(t, DType::f32);
  for (double upstream : {1.0, -2.5}) {
    const Pass eager = run_pass(x, w, labels, mask, 0.3, 4, false, upstream, false);
    const Pass again = run_pass(x, w, labels, mask, 0.3, 4, false, upstream, true);
    // The same chunks in the same order: bit for bit.
    EXPECT_EQ(again.loss.to_vector<float>(), eager.loss.to_vector<float>());
    EXPECT_EQ(again.dx.to_vector<float>(), eager.dx.to_vector<float>());
    EXPECT_EQ(again.dw.to_vector<float>(), eager.dw.to_vector<float>());
  }
  // Between forward and backward the recomputing node holds no (V, C) or (T, C) gradient.
  const int64_t tb = 64, vb = 4096;
  Tensor xb = Tensor::randn({tb, c}, 804).set_requires_grad(true);
  Tensor wb = Tensor::randn({vb, c}, 805).set_requires_grad(true);
  Tensor lb = labels_for(tb, vb, 806);
  auto held_after_forward = [&](bool recompute) {
    const size_t before = memory_stats(Device::cpu).bytes_in_use;
    Tensor loss = lm_loss(xb, wb, lb, Tensor(), 1.0, 8, recompute);
    const size_t held = memory_stats(Device::cpu).bytes_in_use - before;
    autograd::backward(loss);
    return held;
  };
  const size_t dw_bytes = size_t(vb * c) * sizeof(float);
  EXPECT_GE(held_after_forward(false), dw_bytes);
  EXPECT_LT(held_after_forward(true), dw_bytes / 4);
}

TEST(LmLoss, NeverHoldsTheWholeLogits) {
  const int64_t t = 256, c = 8, v = 2048, chunk = 16;
  Tensor x = Tensor::randn({t, c}, 701).set_requires_grad(true);
  Tensor w = Tensor::randn({v, c}, 702).set_requires_grad(true);
  Tensor labels = labels_for(t, v, 703), mask = mask_for(t, DType::f32);
  const size_t whole = size_t(t * v) * sizeof(float);  // 2 MiB
  auto peak_of = [&](int64_t rows) {
    const size_t before = memory_stats(Device::cpu).bytes_in_use;
    reset_peak_memory(Device::cpu);
    Tensor loss = lm_loss(x, w, labels, mask, 1.0, rows);
    const size_t peak = memory_stats(Device::cpu).peak_bytes_in_use - before;
    autograd::backward(loss);
    return peak;
  };
  // Live at the peak: dW and dx (saved), a few chunks of (16, V) and the chunk's small
  // vectors: about 64 KiB + 8 KiB + 4 x 128 KiB, a third of one (T, V) tensor.
  const size_t chunked = peak_of(chunk);
  EXPECT_LT(chunked, whole / 2) << "peak " << chunked << " bytes vs whole logits " << whole;
  // The measurement sees logits: one chunk of all T rows holds them whole (twice, with
  // their gradient).
  EXPECT_GE(peak_of(t), whole);
}

TEST(LmLoss, ChunkRowsFollowTheByteBudget) {
  EXPECT_EQ(lm_loss_chunk_rows(50257), kLmLossChunkBytes / (50257 * 4) / 64 * 64);  // 2560
  EXPECT_EQ(lm_loss_chunk_rows(50257) % 64, 0);
  EXPECT_LE(lm_loss_chunk_rows(50257) * 50257 * 4, kLmLossChunkBytes);
  EXPECT_EQ(lm_loss_chunk_rows(kLmLossChunkBytes / (4 * 40)), 40);  // under 64 rows: as many as fit
  EXPECT_EQ(lm_loss_chunk_rows(int64_t(1) << 40), 1);
}

TEST(LmLoss, RejectsBadInput) {
  Tensor x = Tensor::zeros({3, 4}), w = Tensor::zeros({5, 4});
  // A label out of range is an error even on a masked row.
  EXPECT_THROW(lm_loss(x, w, Tensor::from_vector(std::vector<int64_t>{0, 5, 1}),
                       Tensor::from_vector(std::vector<float>{1, 0, 1}), 1.0),
               Error);
  EXPECT_THROW(lm_loss(x, Tensor::zeros({5, 3}), Tensor::zeros({3}, DType::i64), Tensor(), 1.0),
               Error);
  EXPECT_THROW(lm_loss(x, w, Tensor::zeros({2}, DType::i64), Tensor(), 1.0), Error);
  EXPECT_THROW(lm_loss(x, w, Tensor::zeros({3}, DType::i64), Tensor::ones({4}), 1.0), Error);
}

}  // namespace
}  // namespace driftless::layers
