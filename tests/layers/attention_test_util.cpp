// Implementation of the attention test helpers (attention_test_util.h).
#include "tests/layers/attention_test_util.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "engine/core/env.h"

namespace driftless::testing {

using layers::AttentionSpec;
using layers::ScoreModSpec;

std::string Case::str() const {
  std::ostringstream os;
  os << "docs";
  for (const auto& d : docs)
    os << " (q" << d.q << " k" << d.k << " +" << d.q_pad << "/" << d.k_pad << ")";
  os << " H" << heads << " Hkv" << kv_heads << " D" << head_dim << " causal " << causal
     << " window " << window_left << "," << window_right << " padding " << int(padding) << " mod "
     << int(mod) << " bias " << int(bias);
  return os.str();
}

namespace {
Tensor i32(const std::vector<int32_t>& v) {
  return Tensor::from_vector(v);
}
}  // namespace

Inputs make_inputs(const Case& c) {
  Inputs in;
  std::vector<int32_t> cq{0}, ck{0}, oq{0}, ok{0}, uq, uk;
  AttentionSpec& s = in.spec;
  RefProblem& r = in.ref;
  for (size_t b = 0; b < c.docs.size(); ++b) {
    const DocLen& d = c.docs[b];
    cq.push_back(int32_t(cq.back() + d.q));
    ck.push_back(int32_t(ck.back() + d.k));
    oq.push_back(int32_t(oq.back() + d.q + d.q_pad));
    ok.push_back(int32_t(ok.back() + d.k + d.k_pad));
    uq.push_back(int32_t(d.q));
    uk.push_back(int32_t(d.k));
    s.max_seqlen_q = std::max(s.max_seqlen_q, d.q);
    s.max_seqlen_k = std::max(s.max_seqlen_k, d.k);
    // Queries are the last d.q tokens of the document's d.k keys.
    for (int64_t i = 0; i < d.q; ++i) {
      r.doc_q.push_back(int(b));
      r.pos_q.push_back(int(i + d.k - d.q));
    }
    for (int64_t i = 0; i < d.q_pad; ++i) {
      r.doc_q.push_back(-1);
      r.pos_q.push_back(0);
    }
    for (int64_t j = 0; j < d.k; ++j) {
      r.doc_k.push_back(int(b));
      r.pos_k.push_back(int(j));
    }
    for (int64_t j = 0; j < d.k_pad; ++j) {
      r.doc_k.push_back(-1);
      r.pos_k.push_back(0);
    }
  }
  switch (c.padding) {
    case Padding::none:
      s.cu_seqlens_q = i32(cq);
      s.cu_seqlens_k = i32(ck);
      break;
    case Padding::padded_cu:
      s.cu_seqlens_q = i32(cq);
      s.cu_seqlens_k = i32(ck);
      s.cu_seqlens_q_padded = i32(oq);
      s.cu_seqlens_k_padded = i32(ok);
      break;
    case Padding::seqused:
      s.cu_seqlens_q = i32(oq);
      s.cu_seqlens_k = i32(ok);
      s.seqused_q = i32(uq);
      s.seqused_k = i32(uk);
      break;
  }
  in.t_q = oq.back();
  in.t_k = ok.back();
  const int64_t H = c.heads, Hkv = c.kv_heads, D = c.head_dim;
  s.causal = c.causal;
  s.window_left = c.window_left;
  s.window_right = c.window_right;
  s.softmax_scale = c.scale;
  in.q = Tensor::randn({in.t_q, H, D}, c.seed * 10 + 1, DType::f64);
  in.k = Tensor::randn({in.t_k, Hkv, D}, c.seed * 10 + 2, DType::f64);
  in.v = Tensor::randn({in.t_k, Hkv, D}, c.seed * 10 + 3, DType::f64);
  in.dout = Tensor::randn({in.t_q, H, D}, c.seed * 10 + 4, DType::f64);
  // Padded rows hold garbage in real use; the op must ignore it.
  r.heads = H;
  r.kv_heads = Hkv;
  r.head_dim = D;
  r.scale = c.scale ? *c.scale : 1.0 / std::sqrt(double(D));
  r.causal = c.causal;
  r.window_left = c.window_left;
  r.window_right = c.window_right;
  r.q = in.q.to_vector<double>();
  r.k = in.k.to_vector<double>();
  r.v = in.v.to_vector<double>();

  if (c.bias != BiasKind::none) {
    Shape bs{H, in.t_q, in.t_k};
    if (c.bias == BiasKind::heads) bs[0] = 1;
    if (c.bias == BiasKind::rows) bs[1] = 1;
    if (c.bias == BiasKind::scalar) bs = {1, 1, 1};
    s.bias = Tensor::randn(bs, c.seed * 10 + 5, DType::f64);
    r.bias = s.bias.to_vector<double>();
    for (int d = 0; d < 3; ++d) r.bias_shape[d] = bs[d];
  }
  switch (c.mod) {
    case ModKind::none:
    case ModKind::user:
      break;
    case ModKind::softcap: {
      s.score_mod = ScoreModSpec::make_softcap(c.softcap);
      const double cap = c.softcap;
      r.mod.value = [cap](double x, int, int, int, int) { return cap * std::tanh(x / cap); };
      r.mod.derivative = [cap](double x, int, int, int, int) {
        const double ch = std::cosh(x / cap);
        return 1.0 / (ch * ch);
      };
      break;
    }
    case ModKind::alibi: {
      Tensor slopes = Tensor::uniform({H}, c.seed * 10 + 6, 0.05, 0.5, DType::f64);
      s.score_mod = ScoreModSpec::make_alibi(slopes);
      std::vector<double> sl = slopes.to_vector<double>();
      r.mod.value = [sl](double x, int, int h, int qp, int kp) {
        return x - sl[h] * std::abs(double(qp) - double(kp));
      };
      r.mod.derivative = [](double, int, int, int, int) { return 1.0; };
      break;
    }
    case ModKind::relpos: {
      const int64_t md = c.max_distance, nb = 2 * md + 1;
      Tensor table = Tensor::randn({H, nb}, c.seed * 10 + 7, DType::f64);
      s.score_mod = ScoreModSpec::make_relative_position(table, md);
      std::vector<double> tb = table.to_vector<double>();
      auto bucket = [md](int qp, int kp) {
        int64_t d = std::min<int64_t>(md, std::max<int64_t>(-md, int64_t(qp) - kp));
        return d + md;
      };
      r.mod.value = [tb, bucket, nb](double x, int, int h, int qp, int kp) {
        return x + tb[size_t(h * nb + bucket(qp, kp))];
      };
      r.mod.derivative = [](double, int, int, int, int) { return 1.0; };
      r.mod.param_count = H * nb;
      r.mod.param_grad = [bucket, nb](double dv, double, int, int h, int qp, int kp,
                                      std::vector<double>& g) {
        g[size_t(h * nb + bucket(qp, kp))] += dv;
      };
      break;
    }
  }
  if (c.mod == ModKind::user) {
    in.temperature = Tensor::uniform({H}, c.seed * 10 + 8, 0.5, 1.5, DType::f64);
    std::vector<double> w = in.temperature.to_vector<double>();
    r.mod.value = [w](double x, int, int h, int, int) { return w[h] * x; };
    r.mod.derivative = [w](double, int, int h, int, int) { return w[h]; };
    r.mod.param_count = H;
    r.mod.param_grad = [](double dv, double x, int, int h, int, int, std::vector<double>& g) {
      g[size_t(h)] += dv * x;
    };
  }
  return in;
}

AttentionSpec spec_in(const AttentionSpec& spec, DType dtype) {
  AttentionSpec s = spec;
  if (s.bias.defined()) s.bias = s.bias.to(dtype);
  if (s.score_mod.alibi_slopes.defined())
    s.score_mod.alibi_slopes = s.score_mod.alibi_slopes.to(dtype);
  if (s.score_mod.relative_position_table.defined())
    s.score_mod.relative_position_table = s.score_mod.relative_position_table.to(dtype);
  return s;
}

double rel_error(const std::vector<double>& t, const std::vector<double>& r, double floor) {
  double num = 0, den = floor;
  for (size_t i = 0; i < t.size(); ++i) {
    const double e = std::abs(t[i] - r[i]);
    num = std::isnan(e) ? INFINITY : std::max(num, e);
    den = std::max(den, std::abs(r[i]));
  }
  return den > 0 ? num / den : num;
}

namespace {
void expect_close(const char* name, const Tensor& t, const std::vector<double>& r, double tol,
                  const Case& c, double floor = 0.0) {
  ASSERT_TRUE(t.defined()) << name << " undefined; " << c.str();
  std::vector<double> tv = t.to_vector<double>();
  ASSERT_EQ(tv.size(), r.size()) << name;
  for (double x : tv) ASSERT_FALSE(std::isnan(x)) << name << " has NaN; " << c.str();
  const double e = rel_error(tv, r, floor);
  if (env_set("DRIFTLESS_ATTENTION_VERBOSE"))
    std::printf("  %-10s %s rel error %.3g\n", name, dtype_name(t.dtype()), e);
  EXPECT_LE(e, tol) << name << "; " << c.str();
}

// Rows (per side) that must be exactly zero: padding, and query rows that see no key.
void expect_zero_rows(const char* name, const Tensor& t, const std::vector<int>& doc, int64_t heads,
                      const std::vector<double>& lse, const Case& c) {
  std::vector<double> tv = t.to_vector<double>();
  const int64_t rows = int64_t(doc.size()), D = c.head_dim;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      const bool zero = doc[i] < 0 || (!lse.empty() && std::isinf(lse[size_t(h * rows + i)]));
      if (!zero) continue;
      for (int64_t d = 0; d < D; ++d)
        ASSERT_EQ(tv[size_t((i * heads + h) * D + d)], 0.0)
            << name << " row " << i << " head " << h << " must be exactly 0; " << c.str();
    }
}
}  // namespace

void expect_matches_reference(const Case& c, DType dtype, double tol) {
  Inputs in = make_inputs(c);
  if (c.tweak) c.tweak(in);
  AttentionSpec spec = spec_in(in.spec, dtype);
  Tensor q = in.q.to(dtype), k = in.k.to(dtype), v = in.v.to(dtype), dout = in.dout.to(dtype);
  layers::AttentionOutputs f;
  layers::AttentionGrads g;
  if (c.mod == ModKind::user) {
    Tensor wf = in.temperature.to(DType::f32);
    PerHeadTemperature m{wf.data<float>(), in.temperature.data<double>(), int(c.heads)};
    f = layers::attention_forward_with(q, k, v, spec, m);
    g = layers::attention_backward_with(q, k, v, spec, f.out, f.lse, dout, m);
  } else {
    f = layers::attention_forward(q, k, v, spec);
    g = layers::attention_backward(q, k, v, spec, f.out, f.lse, dout);
  }
  RefResult r = reference_attention(in.ref, in.dout.to_vector<double>());

  expect_close("out", f.out, r.out, tol, c);
  // LSE: -inf exactly where the reference has it, else close in absolute terms (it is a
  // log, so relative-to-max is the wrong scale).
  std::vector<double> lse = f.lse.to_vector<double>();
  ASSERT_EQ(lse.size(), r.lse.size());
  double lse_err = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(r.lse[i])) {
      ASSERT_TRUE(std::isinf(lse[i]) && lse[i] < 0)
          << "lse[" << i << "] = " << lse[i] << ", expected -inf; " << c.str();
    } else {
      ASSERT_TRUE(std::isfinite(lse[i])) << "lse[" << i << "] = " << lse[i] << "; " << c.str();
      lse_err = std::max(lse_err, std::abs(lse[i] - r.lse[i]) / std::max(1.0, std::abs(r.lse[i])));
    }
  }
  EXPECT_LE(lse_err, tol) << "lse; " << c.str();
  expect_close("dq", g.dq, r.dq, tol, c);
  expect_close("dk", g.dk, r.dk, tol, c);
  expect_close("dv", g.dv, r.dv, tol, c);
  // A bias constant along k has gradient 0 in exact arithmetic (softmax is shift
  // invariant), so its error is measured against 1 (the size of the other gradients).
  if (c.bias != BiasKind::none)
    expect_close("dbias", g.dbias, r.dbias, tol, c, c.bias == BiasKind::scalar ? 1.0 : 0.0);
  if (c.mod == ModKind::relpos || c.mod == ModKind::user)
    expect_close("dscore_mod", g.dscore_mod, r.dparams, tol, c);
  expect_zero_rows("out", f.out, in.ref.doc_q, c.heads, r.lse, c);
  expect_zero_rows("dq", g.dq, in.ref.doc_q, c.heads, r.lse, c);
  expect_zero_rows("dk", g.dk, in.ref.doc_k, c.kv_heads, {}, c);
  expect_zero_rows("dv", g.dv, in.ref.doc_k, c.kv_heads, {}, c);
}

}  // namespace driftless::testing
