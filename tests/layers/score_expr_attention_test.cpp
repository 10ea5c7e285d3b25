// Expression modifiers in the CPU attention op: the built-ins written as expressions give
// the built-ins' forward and backward (f64 within 1e-12, f32 within 1e-6), a learnable table
// gets the relative-position table's gradient and matches finite differences, and mask
// expressions equal the spec's window and a prefix-LM bias mask. Lengths cut tiles unevenly.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/autograd/autograd.h"
#include "layers/attention/attention.h"
#include "layers/attention/expr/expr.h"

namespace driftless::layers {
namespace {

constexpr int64_t kH = 4, kHkv = 2, kD = 8;
const std::vector<int64_t> kLens{7, 70, 1, 33};

struct Result {
  std::vector<double> out, lse, dq, dk, dv, dmod;
};

struct Data {
  Tensor q, k, v, dout;
  explicit Data(DType dt, int64_t t = 111) {
    q = Tensor::randn({t, kH, kD}, 11, DType::f64, 0.0, 1.5).to(dt);
    k = Tensor::randn({t, kHkv, kD}, 12, DType::f64, 0.0, 1.5).to(dt);
    v = Tensor::randn({t, kHkv, kD}, 13, DType::f64).to(dt);
    dout = Tensor::randn({t, kH, kD}, 14, DType::f64).to(dt);
  }
};

Result run(const Data& x, const AttentionSpec& spec) {
  const AttentionOutputs f = attention_forward(x.q, x.k, x.v, spec);
  const AttentionGrads g = attention_backward(x.q, x.k, x.v, spec, f.out, f.lse, x.dout);
  Result r{f.out.to_vector<double>(), f.lse.to_vector<double>(), g.dq.to_vector<double>(),
           g.dk.to_vector<double>(),  g.dv.to_vector<double>(),  {}};
  if (g.dscore_mod.defined()) r.dmod = g.dscore_mod.to_vector<double>();
  return r;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol,
                  const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 1e-30, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      EXPECT_EQ(a[i], b[i]) << what << " at " << i;
      continue;
    }
    scale = std::max(scale, std::abs(b[i]));
    err = std::max(err, std::abs(a[i] - b[i]));
  }
  EXPECT_LE(err / scale, tol) << what;
}

void expect_same(const Result& a, const Result& b, double tol) {
  expect_close(a.out, b.out, tol, "out");
  expect_close(a.lse, b.lse, tol, "lse");
  expect_close(a.dq, b.dq, tol, "dq");
  expect_close(a.dk, b.dk, tol, "dk");
  expect_close(a.dv, b.dv, tol, "dv");
  expect_close(a.dmod, b.dmod, tol, "dscore_mod");
}

AttentionSpec base(bool causal = true) {
  return AttentionSpec::from_lengths(kLens, kLens, causal);
}

std::vector<expr::ParamDecl> slope_decl(bool learnable) {
  std::vector<double> s;
  for (int h = 0; h < kH; ++h) s.push_back(std::pow(2.0, -8.0 * (h + 1) / kH));
  return {{"slope", {kH}, s, learnable}};
}

ScoreModSpec expression(const std::string& score, const std::string& mask,
                        const std::vector<expr::ParamDecl>& decls, DType dt) {
  std::vector<Tensor> params;
  for (const auto& d : decls)
    params.push_back(Tensor::from_vector(d.init).reshape(Shape(d.shape)).to(dt));
  return ScoreModSpec::make_expression(
      score.empty() ? nullptr : expr::compile_score_mod(score, decls, int(kH)),
      mask.empty() ? nullptr : expr::compile_mask_mod(mask, decls, int(kH)), params);
}

TEST(ScoreExprAttention, SoftcapAndAlibiEqualTheBuiltins) {
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 1e-6;
    const Data x(dt);
    for (bool causal : {true, false}) {
      AttentionSpec a = base(causal), b = base(causal);
      a.score_mod = ScoreModSpec::make_softcap(2.0);
      b.score_mod = expression("2 * tanh(score / 2)", "", {}, dt);
      expect_same(run(x, b), run(x, a), tol);
      const auto decls = slope_decl(false);
      a.score_mod = ScoreModSpec::make_alibi(Tensor::from_vector(decls[0].init).to(dt));
      b.score_mod = expression("score - slope[h] * abs(q - k)", "", decls, dt);
      expect_same(run(x, b), run(x, a), tol);
    }
  }
}

TEST(ScoreExprAttention, LearnableDistanceBiasEqualsRelativePositionTable) {
  std::vector<double> table;
  for (int i = 0; i < kH * 9; ++i) table.push_back(0.1 * std::sin(1.3 * i));
  const std::vector<expr::ParamDecl> decls{{"bias", {kH, 9}, table, true}};
  for (DType dt : {DType::f64, DType::f32}) {
    const Data x(dt);
    AttentionSpec a = base(false), b = base(false);
    a.score_mod =
        ScoreModSpec::make_relative_position(Tensor::from_vector(table).reshape({kH, 9}).to(dt), 4);
    b.score_mod = expression("score + bias[h, clamp(q - k, -4, 4) + 4]", "", decls, dt);
    expect_same(run(x, b), run(x, a), dt == DType::f64 ? 1e-12 : 1e-6);
  }
}

TEST(ScoreExprAttention, LearnableParameterGradientMatchesFiniteDifferences) {
  // A per-head scale and a bias by clamped distance, both learnable; loss = <out, dout>.
  std::vector<double> table;
  for (int i = 0; i < kH * 5; ++i) table.push_back(0.2 * std::cos(0.7 * i));
  std::vector<expr::ParamDecl> decls{{"bias", {kH, 5}, table, true},
                                     {"temp", {kH}, {1.1, 0.9, 0.7, 1.3}, true}};
  const std::string src = "temp[h] * score + bias[h, clamp(q - k, 0, 4)]";
  const Data x(DType::f64, 111);
  AttentionSpec s = base(true);
  s.score_mod = expression(src, "", decls, DType::f64);
  const Result g = run(x, s);
  ASSERT_EQ(g.dmod.size(), size_t(kH * 5 + kH));
  auto loss = [&](const std::vector<expr::ParamDecl>& d) {
    AttentionSpec t = base(true);
    t.score_mod = expression(src, "", d, DType::f64);
    const auto out = attention_forward(x.q, x.k, x.v, t).out.to_vector<double>();
    const auto dout = x.dout.to_vector<double>();
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * dout[i];
    return l;
  };
  const double eps = 1e-6;
  size_t at = 0;
  for (size_t p = 0; p < decls.size(); ++p)
    for (size_t j = 0; j < decls[p].init.size(); ++j, ++at) {
      auto d = decls;
      d[p].init[j] += eps;
      const double up = loss(d);
      d[p].init[j] -= 2 * eps;
      const double fd = (up - loss(d)) / (2 * eps);
      EXPECT_NEAR(g.dmod[at], fd, 1e-7 * std::max(1.0, std::abs(fd))) << decls[p].name << j;
    }
  // Through autograd: the gradient lands in each learnable tensor.
  AttentionSpec t = base(true);
  t.score_mod = expression(src, "", decls, DType::f64);
  for (Tensor& p : t.score_mod.expression_params) p.set_requires_grad(true);
  Tensor out = attention(x.q, x.k, x.v, t);
  autograd::backward(out, x.dout);
  const auto gb = t.score_mod.expression_params[0].grad().to_vector<double>();
  const auto gt = t.score_mod.expression_params[1].grad().to_vector<double>();
  for (size_t i = 0; i < gb.size(); ++i) EXPECT_NEAR(gb[i], g.dmod[i], 1e-12);
  for (size_t i = 0; i < gt.size(); ++i) EXPECT_NEAR(gt[i], g.dmod[gb.size() + i], 1e-12);
}

TEST(ScoreExprAttention, SlidingWindowMaskEqualsTheSpecWindow) {
  for (DType dt : {DType::f64, DType::f32}) {
    const Data x(dt);
    for (int64_t w : {0, 5, 40}) {
      AttentionSpec a = base(true), b = base(true);
      a.window_left = w;
      b.score_mod = expression("", "q - k <= " + std::to_string(w), {}, dt);
      expect_same(run(x, b), run(x, a), dt == DType::f64 ? 1e-12 : 1e-6);
      // With a score expression too: the mask composes with it.
      a.score_mod = ScoreModSpec::make_softcap(3.0);
      b.score_mod = expression("3 * tanh(score / 3)", "q - k <= " + std::to_string(w), {}, dt);
      expect_same(run(x, b), run(x, a), dt == DType::f64 ? 1e-12 : 1e-6);
    }
  }
}

TEST(ScoreExprAttention, PrefixLmMaskEqualsABiasMask) {
  // Without causality in the spec, the mask decides: keys of the first 5 positions are seen
  // by every query, later keys only causally. A mask can only hide: documents stay apart.
  const Data x(DType::f64);
  const int64_t T = 111;
  std::vector<double> bias(size_t(T * T), -INFINITY);
  int64_t start = 0;
  for (int64_t n : kLens) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (j < 5 || j <= i) bias[size_t((start + i) * T + start + j)] = 0;
    start += n;
  }
  AttentionSpec a = base(false), b = base(false);
  a.bias = Tensor::from_vector(bias).reshape({1, T, T});
  b.score_mod = expression("", "k < 5 || k <= q", {}, DType::f64);
  Result ra = run(x, a), rb = run(x, b);
  expect_same(rb, ra, 1e-12);
  // A mask hiding everything of head 1: its rows are 0 with LSE -inf, no NaN.
  b.score_mod = expression("", "h != 1", {}, DType::f64);
  const Result r = run(x, b);
  for (int64_t t = 0; t < T; ++t) EXPECT_EQ(r.lse[size_t(1 * T + t)], -INFINITY);
  for (double v : r.dq) EXPECT_TRUE(std::isfinite(v));
}

TEST(ScoreExprAttention, HeadOffsetReadsTheGlobalHead) {
  // An a2a call holding heads [2, 4) of the model indexes slope[h] with the global head.
  const Data x(DType::f64);
  const auto decls = slope_decl(false);
  Data half = x;
  half.q = x.q.narrow(1, 2, 2).contiguous();
  half.dout = x.dout.narrow(1, 2, 2).contiguous();
  half.k = x.k.narrow(1, 1, 1).contiguous();
  half.v = x.v.narrow(1, 1, 1).contiguous();
  AttentionSpec a = base(true), b = base(true);
  a.score_mod =
      ScoreModSpec::make_alibi(Tensor::from_vector(decls[0].init).narrow(0, 2, 2).contiguous());
  b.score_mod = expression("score - slope[h] * abs(q - k)", "", decls, DType::f64);
  b.score_mod.head_offset = 2;
  expect_same(run(half, b), run(half, a), 1e-12);
  b.score_mod.head_offset = 3;  // heads [3, 5) of 4
  EXPECT_THROW(run(half, b), Error);
}

// A score that is not finite on a visible pair is NaN in its row's out and LSE (so in the
// loss, which the run's non-finite policy counts), never a pair silently hidden: all-NaN rows
// used to come out as rows that saw nothing, a -inf pair as a masked one.
TEST(ScoreExprAttention, NonFiniteScoresMakeTheirRowsNaNNotHidden) {
  const Data x(DType::f64);
  const int64_t T = 111;
  AttentionSpec a = base(true);
  a.score_mod = expression("score + sqrt(q - 5.0)", "", {}, DType::f64);
  Result r = run(x, a);
  int64_t row = 0;
  for (int64_t len : kLens)
    for (int64_t q = 0; q < len; ++q, ++row)
      for (int64_t h = 0; h < kH; ++h) {
        const double lse = r.lse[size_t(h * T + row)];
        const double out = r.out[size_t((row * kH + h) * kD)];
        EXPECT_EQ(std::isnan(lse), q < 5) << "row " << row << " q " << q;
        EXPECT_EQ(std::isnan(out), q < 5) << "row " << row << " q " << q;
      }
  // -inf on the diagonal only: every row (causal: each sees its diagonal) is NaN.
  a.score_mod = expression("score + log(q - k + 0.0)", "", {}, DType::f64);
  r = run(x, a);
  for (double v : r.lse) EXPECT_TRUE(std::isnan(v));
  bool nan_grad = false;
  for (double v : r.dq) nan_grad = nan_grad || std::isnan(v);
  EXPECT_TRUE(nan_grad);
}

}  // namespace
}  // namespace driftless::layers
