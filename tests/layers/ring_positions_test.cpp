// Document positions in the ring's attention calls (spec.h "Positions", ring_route.h): on one
// rank over two micro-sequences, the ring's diagonal calls (chunks that start mid-document)
// and partial calls (a chunk's first document against earlier chunks and the past in the K/V
// buffer) give a modifier and a mask the positions of one causal call over the sequence, so
// out, dq, dk and dv equal that call's. The expressions read absolute key positions (a table
// by k, attention sinks k < 3), so a shift off by one in either direction fails.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "data/sampler.h"
#include "engine/autograd/autograd.h"
#include "layers/attention/attention.h"
#include "layers/attention/expr/expr.h"
#include "layers/attention/routes/ring_route.h"
#include "tests/layers/gpt_test_util.h"

namespace driftless::layers {
namespace {

constexpr int64_t kH = 4, kHkv = 2, kD = 8, kS = 48, kM = 2;
// Document 13 crosses the chunk boundary at 12; 29 starts in micro-sequence 0 and crosses
// both chunk boundaries of micro-sequence 1 (its sinks sit in the past).
const std::vector<int32_t> kDocs{13, 29, 6};

ScoreModSpec expression_mod() {
  std::vector<double> table;
  for (int64_t i = 0; i < kH * kS; ++i) table.push_back(0.5 * std::sin(0.7 * double(i)));
  const std::vector<expr::ParamDecl> decls{{"pos", {kH, kS}, table, false}};
  auto score = expr::compile_score_mod("score + pos[h, min(k, 47)] - 0.05 * (q - k)", decls, kH);
  auto mask = expr::compile_mask_mod("q - k < 9 || k < 3", decls, kH);
  return ScoreModSpec::make_expression(score, mask, {Tensor::from_vector(table).view({kH, kS})});
}

struct Grads {
  Tensor out, dq, dk, dv;
};

// One causal call over the whole sequence.
Grads single_call(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                  const ScoreModSpec& mod) {
  AttentionSpec spec = AttentionSpec::from_lengths({13, 29, 6}, {13, 29, 6}, true);
  spec.score_mod = mod;
  const AttentionOutputs f = attention_forward(q, k, v, spec);
  const AttentionGrads g = attention_backward(q, k, v, spec, f.out, f.lse, dout);
  return {f.out, g.dq, g.dk, g.dv};
}

// The ring on one rank: micro-sequence i is chunks 0 and 1 of 2; backward in reverse order.
Grads ring(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
           const ScoreModSpec& mod) {
  const data::PackedSequence seq = test_util::packed(kDocs, 37, 1);
  KvBuffer buffer;
  buffer.ensure(1, kS, kHkv, kD, DType::f32, Device::cpu, DType::f32);
  buffer.zero_grad();
  KvExchange one;
  AttentionSpec base;
  base.score_mod = mod;
  const int64_t L = kS / kM;
  std::vector<data::ModelInput> inputs;
  for (int32_t i = 0; i < kM; ++i)
    for (int32_t c = 0; c < 2; ++c) inputs.push_back(data::make_model_input(seq, {i, kM, c, 2}, 0));
  std::vector<Tensor> leaves, outs;
  for (int64_t i = 0; i < kM; ++i) {
    for (const Tensor& t : {q, k, v})
      leaves.push_back(t.narrow(0, i * L, L).clone().set_requires_grad());
    const size_t at = size_t(3 * i);
    outs.push_back(ring_attention(leaves[at], leaves[at + 1], leaves[at + 2],
                                  {{{&inputs[size_t(2 * i)], &inputs[size_t(2 * i + 1)]}, 0}},
                                  buffer, one, base));
  }
  for (int64_t i = kM - 1; i >= 0; --i)
    autograd::backward(outs[size_t(i)], dout.narrow(0, i * L, L));
  Grads g{Tensor::zeros(q.shape()), Tensor::zeros(q.shape()), Tensor::zeros(k.shape()),
          Tensor::zeros(k.shape())};
  for (int64_t i = 0; i < kM; ++i) {
    g.out.narrow(0, i * L, L).copy_(outs[size_t(i)].detach());
    g.dq.narrow(0, i * L, L).copy_(leaves[size_t(3 * i)].grad());
    g.dk.narrow(0, i * L, L).copy_(leaves[size_t(3 * i + 1)].grad());
    g.dv.narrow(0, i * L, L).copy_(leaves[size_t(3 * i + 2)].grad());
  }
  return g;
}

double max_rel(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(double(x[i]) - double(y[i])));
    scale = std::max(scale, std::abs(double(y[i])));
  }
  return err / scale;
}

void expect_ring_is_single_call(const ScoreModSpec& mod) {
  const Tensor q = Tensor::randn({kS, kH, kD}, 1), k = Tensor::randn({kS, kHkv, kD}, 2),
               v = Tensor::randn({kS, kHkv, kD}, 3), dout = Tensor::randn({kS, kH, kD}, 4);
  const Grads want = single_call(q, k, v, dout, mod), got = ring(q, k, v, dout, mod);
  EXPECT_LT(max_rel(got.out, want.out), 1e-5);
  EXPECT_LT(max_rel(got.dq, want.dq), 1e-5);
  EXPECT_LT(max_rel(got.dk, want.dk), 1e-5);
  EXPECT_LT(max_rel(got.dv, want.dv), 1e-5);
}

TEST(RingPositions, ExpressionsSeeDocumentPositionsInEveryCall) {
  expect_ring_is_single_call(expression_mod());
}

TEST(RingPositions, AlibiSeesTheTokenDistanceInEveryCall) {
  expect_ring_is_single_call(
      ScoreModSpec::make_alibi(Tensor::from_vector(std::vector<float>{0.5f, 0.25f, 0.125f, 1.f})));
}

// Without the shift the ring's calls would give document 0 its rows' places in the call.
TEST(RingPositions, TheShiftMovesOnlyTheFirstDocument) {
  const Tensor q = Tensor::randn({7, kH, kD}, 5), k = Tensor::randn({10, kHkv, kD}, 6),
               v = Tensor::randn({10, kHkv, kD}, 7);
  AttentionSpec plain = AttentionSpec::from_lengths({3, 4}, {6, 4}, true);
  plain.score_mod = expression_mod();
  AttentionSpec shifted = plain;
  shifted.first_doc_shift = {5, 5};
  const AttentionOutputs a = attention_forward(q, k, v, plain),
                         b = attention_forward(q, k, v, shifted);
  // Document 0 (rows 0-2) moves: its keys' table entries and its sinks change; document 1 does not.
  EXPECT_GT(max_rel(b.out.narrow(0, 0, 3), a.out.narrow(0, 0, 3)), 1e-3);
  EXPECT_EQ(max_rel(b.out.narrow(0, 3, 4), a.out.narrow(0, 3, 4)), 0.0);
}

}  // namespace
}  // namespace driftless::layers
