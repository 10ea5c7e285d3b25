// Layout contracts of the attention op: padding between sequences (both conventions),
// first_document_begin with a poisoned fake past, agreement of a micro-sequence with the
// whole-sequence run, no shared state between calls, bitwise determinism, bf16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tests/layers/attention_test_util.h"

namespace driftless::testing {
namespace {

using layers::AttentionSpec;
using layers::ScoreModSpec;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

// Fills rows [begin, end) of dim 0 with NaN.
void poison_rows(const Tensor& t, int64_t begin, int64_t end) {
  if (end > begin) t.narrow(0, begin, end - begin).fill_(kNaN);
}

void poison_padding(Inputs& in) {
  for (size_t i = 0; i < in.ref.doc_q.size(); ++i)
    if (in.ref.doc_q[i] < 0) {
      poison_rows(in.q, int64_t(i), int64_t(i) + 1);
      poison_rows(in.dout, int64_t(i), int64_t(i) + 1);
    }
  for (size_t j = 0; j < in.ref.doc_k.size(); ++j)
    if (in.ref.doc_k[j] < 0) {
      poison_rows(in.k, int64_t(j), int64_t(j) + 1);
      poison_rows(in.v, int64_t(j), int64_t(j) + 1);
    }
  in.ref.q = in.q.to_vector<double>();
  in.ref.k = in.k.to_vector<double>();
  in.ref.v = in.v.to_vector<double>();
}

TEST(AttentionLayout, PaddingBothConventionsPoisonedPadRows) {
  for (Padding pad : {Padding::padded_cu, Padding::seqused}) {
    Case c;
    // Padding after documents, a document that is all padding, lengths off the tiles.
    c.docs = {{7, 7, 2, 2}, {0, 0, 5, 3}, {65, 65, 0, 1}, {20, 100, 9, 28}, {1, 1, 1, 0}};
    c.heads = 2;
    c.kv_heads = 1;
    c.padding = pad;
    c.tweak = poison_padding;
    expect_matches_reference(c, DType::f32, 1e-5);
    expect_matches_reference(c, DType::f64, 1e-12);
  }
}

// One sequence of S = 200 tokens, documents [0, 37), [37, 120), [120, 200). The
// micro-sequence holds queries [100, 160): first_document_begin = 37, K extent [37, 160).
struct MicroSequence {
  static constexpr int64_t S = 200, fdb = 37, past = 100, end = 160, H = 4, Hkv = 2, D = 16;
  Tensor kbuf, vbuf;         // (S, H_kv, D): the per-layer K/V buffer, garbage outside the extent
  Tensor q_full, dout_full;  // (S, H, D): queries of the whole sequence
  Tensor table;              // relative-position table (H, 2 * 4 + 1)
  MicroSequence() {
    kbuf = Tensor::randn({S, Hkv, D}, 101);
    vbuf = Tensor::randn({S, Hkv, D}, 102);
    q_full = Tensor::randn({S, H, D}, 103);
    dout_full = Tensor::randn({S, H, D}, 104);
    table = Tensor::randn({H, 9}, 105);
  }
  AttentionSpec micro_spec() const {
    AttentionSpec s =
        AttentionSpec::from_lengths({120 - past, end - 120}, {120 - fdb, end - 120}, true);
    s.score_mod = ScoreModSpec::make_relative_position(table, 4);
    return s;
  }
  AttentionSpec full_spec() const {
    AttentionSpec s = AttentionSpec::from_lengths({37, 83, 80}, {37, 83, 80}, true);
    s.score_mod = ScoreModSpec::make_relative_position(table, 4);
    return s;
  }
};

TEST(AttentionLayout, FirstDocumentBeginNeverReadsThePast) {
  MicroSequence m;
  using M = MicroSequence;
  const int64_t ext = M::end - M::fdb;
  // Clean copies of the extent, computed before the buffer is poisoned.
  Tensor k_clean = m.kbuf.narrow(0, M::fdb, ext).clone();
  Tensor v_clean = m.vbuf.narrow(0, M::fdb, ext).clone();
  poison_rows(m.kbuf, 0, M::fdb);
  poison_rows(m.vbuf, 0, M::fdb);
  poison_rows(m.kbuf, M::end, M::S);  // not yet written by later micro-sequences
  poison_rows(m.vbuf, M::end, M::S);
  Tensor q = m.q_full.narrow(0, M::past, M::end - M::past);
  Tensor dout = m.dout_full.narrow(0, M::past, M::end - M::past);
  Tensor k = m.kbuf.narrow(0, M::fdb, ext), v = m.vbuf.narrow(0, M::fdb, ext);
  const AttentionSpec spec = m.micro_spec();

  auto f = layers::attention_forward(q, k, v, spec);
  auto g = layers::attention_backward(q, k, v, spec, f.out, f.lse, dout);
  auto fc = layers::attention_forward(q, k_clean, v_clean, spec);
  auto gc = layers::attention_backward(q, k_clean, v_clean, spec, fc.out, fc.lse, dout);
  EXPECT_TRUE(same_bits(f.out, fc.out));
  EXPECT_TRUE(same_bits(f.lse, fc.lse));
  EXPECT_TRUE(same_bits(g.dq, gc.dq));
  EXPECT_TRUE(same_bits(g.dk, gc.dk));
  EXPECT_TRUE(same_bits(g.dv, gc.dv));
  EXPECT_TRUE(same_bits(g.dscore_mod, gc.dscore_mod));  // the parameter gradient

  // dK/dV accumulate into the gradient buffer slice; nothing lands before the extent.
  Tensor dkbuf = Tensor::zeros({M::S, M::Hkv, M::D});
  dkbuf.narrow(0, M::fdb, ext).add_(g.dk);
  for (double x : dkbuf.narrow(0, 0, M::fdb).to_vector<double>()) ASSERT_EQ(x, 0.0);
  for (double x : g.dk.to_vector<double>()) ASSERT_TRUE(std::isfinite(x));

  // The same rows of the whole-sequence run: out, lse and dq agree bit for bit (the key
  // tiles are cut at the same document positions in both runs).
  Tensor kf = Tensor::randn({M::S, M::Hkv, M::D}, 101),
         vf = Tensor::randn({M::S, M::Hkv, M::D}, 102);
  auto ff = layers::attention_forward(m.q_full, kf, vf, m.full_spec());
  auto gf = layers::attention_backward(m.q_full, kf, vf, m.full_spec(), ff.out, ff.lse,
                                       m.dout_full.narrow(0, 0, M::S).clone());
  const int64_t n = M::end - M::past;
  EXPECT_TRUE(same_bits(f.out, ff.out.narrow(0, M::past, n)));
  EXPECT_TRUE(same_bits(f.lse, ff.lse.narrow(1, M::past, n)));
  // dq of the full run also sees dout of later queries only through dk/dv, not dq.
  EXPECT_TRUE(same_bits(g.dq, gf.dq.narrow(0, M::past, n)));
}

TEST(AttentionLayout, FirstDocumentBeginMatchesReference) {
  // The micro-sequence above as a Case: queries are the last rows of each document's keys.
  Case c;
  c.docs = {{20, 83}, {40, 40}};
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  c.mod = ModKind::relpos;
  c.max_distance = 4;
  expect_matches_reference(c, DType::f32, 1e-5);
}

TEST(AttentionLayout, NoSharedStateBetweenCalls) {
  // Two autograd calls of different shapes; backward in either order gives the same
  // gradients as the non-autograd backward of each call alone.
  Tensor q1 = Tensor::randn({70, 4, 16}, 1), k1 = Tensor::randn({70, 2, 16}, 2),
         v1 = Tensor::randn({70, 2, 16}, 3), d1 = Tensor::randn({70, 4, 16}, 4);
  Tensor q2 = Tensor::randn({9, 2, 32}, 5), k2 = Tensor::randn({40, 1, 32}, 6),
         v2 = Tensor::randn({40, 1, 32}, 7), d2 = Tensor::randn({9, 2, 32}, 8);
  AttentionSpec s1 = AttentionSpec::from_lengths({30, 40}, {30, 40}, true);
  AttentionSpec s2 = AttentionSpec::from_lengths({4, 5}, {20, 20}, false);
  auto f1 = layers::attention_forward(q1, k1, v1, s1);
  auto g1 = layers::attention_backward(q1, k1, v1, s1, f1.out, f1.lse, d1);
  auto f2 = layers::attention_forward(q2, k2, v2, s2);
  auto g2 = layers::attention_backward(q2, k2, v2, s2, f2.out, f2.lse, d2);
  for (bool first_one_first : {true, false}) {
    Tensor a1 = q1.clone(), b1 = k1.clone(), c1 = v1.clone();
    Tensor a2 = q2.clone(), b2 = k2.clone(), c2 = v2.clone();
    for (Tensor* t : {&a1, &b1, &c1, &a2, &b2, &c2}) t->set_requires_grad(true);
    layers::AttentionResult r1, r2;
    Tensor o1 = layers::attention(a1, b1, c1, s1, &r1);
    Tensor o2 = layers::attention(a2, b2, c2, s2, &r2);
    EXPECT_TRUE(same_bits(r1.lse, f1.lse));
    EXPECT_TRUE(same_bits(r2.lse, f2.lse));
    if (first_one_first) {
      autograd::backward(o1, d1);
      autograd::backward(o2, d2);
    } else {
      autograd::backward(o2, d2);
      autograd::backward(o1, d1);
    }
    EXPECT_TRUE(same_bits(a1.grad(), g1.dq));
    EXPECT_TRUE(same_bits(b1.grad(), g1.dk));
    EXPECT_TRUE(same_bits(c1.grad(), g1.dv));
    EXPECT_TRUE(same_bits(a2.grad(), g2.dq));
    EXPECT_TRUE(same_bits(b2.grad(), g2.dk));
    EXPECT_TRUE(same_bits(c2.grad(), g2.dv));
  }
}

TEST(AttentionLayout, Deterministic) {
  Case c;
  c.docs = {{65, 129}, {0, 3}, {33, 33}};
  c.heads = 4;
  c.kv_heads = 2;
  c.bias = BiasKind::heads;
  c.mod = ModKind::softcap;
  Inputs in = make_inputs(c);
  AttentionSpec spec = spec_in(in.spec, DType::f32);
  Tensor q = in.q.to(DType::f32), k = in.k.to(DType::f32), v = in.v.to(DType::f32),
         d = in.dout.to(DType::f32);
  auto f1 = layers::attention_forward(q, k, v, spec);
  auto g1 = layers::attention_backward(q, k, v, spec, f1.out, f1.lse, d);
  auto f2 = layers::attention_forward(q, k, v, spec);
  auto g2 = layers::attention_backward(q, k, v, spec, f2.out, f2.lse, d);
  EXPECT_TRUE(same_bits(f1.out, f2.out));
  EXPECT_TRUE(same_bits(f1.lse, f2.lse));
  EXPECT_TRUE(same_bits(g1.dq, g2.dq));
  EXPECT_TRUE(same_bits(g1.dk, g2.dk));
  EXPECT_TRUE(same_bits(g1.dv, g2.dv));
  EXPECT_TRUE(same_bits(g1.dbias, g2.dbias));
}

TEST(AttentionLayout, Bf16ComputesInF32) {
  Case c;
  c.docs = {{65, 65}, {7, 30}};
  Inputs in = make_inputs(c);
  Tensor q = in.q.to(DType::bf16), k = in.k.to(DType::bf16), v = in.v.to(DType::bf16);
  auto f = layers::attention_forward(q, k, v, in.spec);
  auto g = layers::attention_backward(q, k, v, in.spec, f.out, f.lse, in.dout.to(DType::bf16));
  EXPECT_EQ(f.out.dtype(), DType::bf16);
  EXPECT_EQ(f.lse.dtype(), DType::f32);
  EXPECT_EQ(g.dk.dtype(), DType::bf16);
  // Same as the f32 path on the bf16-rounded inputs, rounded once at the end.
  auto f32 =
      layers::attention_forward(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), in.spec);
  EXPECT_TRUE(same_bits(f.out, f32.out.to(DType::bf16)));
  EXPECT_TRUE(same_bits(f.lse, f32.lse));
}

// FlashAttention's plain bf16 reference (the bound of the tensor-core kernels' tests): P and
// dS are rounded to bf16 where they enter a product, nothing else is. So its LSE is the plain
// bf16 path's to the bit, while out, dq, dk and dv move, by about a bf16 rounding.
TEST(AttentionLayout, Bf16OperandsReferenceRoundsOnlyTheProductOperands) {
  Case c;
  c.docs = {{65, 65}, {7, 30}};
  Inputs in = make_inputs(c);
  Tensor q = in.q.to(DType::bf16), k = in.k.to(DType::bf16), v = in.v.to(DType::bf16);
  Tensor dout = in.dout.to(DType::bf16);
  const auto plain = layers::attention_forward(q, k, v, in.spec);
  const auto ref = layers::attention_forward_bf16_operands(q, k, v, in.spec);
  EXPECT_TRUE(same_bits(ref.lse, plain.lse));
  EXPECT_FALSE(same_bits(ref.out, plain.out)) << "P not rounded";
  const auto gp = layers::attention_backward(q, k, v, in.spec, plain.out, plain.lse, dout);
  const auto gr = layers::attention_backward_bf16_operands(q, k, v, in.spec, plain.out, plain.lse,
                                                           dout);
  EXPECT_FALSE(same_bits(gr.dq, gp.dq)) << "dS not rounded for dQ";
  EXPECT_FALSE(same_bits(gr.dk, gp.dk)) << "dS not rounded for dK";
  EXPECT_FALSE(same_bits(gr.dv, gp.dv)) << "P not rounded for dV";
  // Against float64 on the same inputs: off by bf16 roundings, not by a wrong formula.
  auto f64 = [](const Tensor& t) { return t.to(DType::f64); };
  const auto exact = layers::attention_forward(f64(q), f64(k), f64(v), in.spec);
  const auto ge =
      layers::attention_backward(f64(q), f64(k), f64(v), in.spec, exact.out, exact.lse, f64(dout));
  auto rel = [](const Tensor& t, const Tensor& r) {
    const auto a = t.to_vector<double>(), b = r.to_vector<double>();
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num = std::max(num, std::abs(a[i] - b[i]));
      den = std::max(den, std::abs(b[i]));
    }
    return num / den;
  };
  EXPECT_LT(rel(ref.out, exact.out), 1e-2);
  EXPECT_LT(rel(gr.dq, ge.dq), 1e-2);
  EXPECT_LT(rel(gr.dk, ge.dk), 1e-2);
  EXPECT_LT(rel(gr.dv, ge.dv), 1e-2);
  EXPECT_THROW(layers::attention_forward_bf16_operands(in.q, in.k, in.v, in.spec), Error)
      << "f32 inputs refused";
}

}  // namespace
}  // namespace driftless::testing
