// The CUDA attention tests' problems and checks (attention_cuda_test.cpp, attention_fast_test.cpp
// whose criterion is described there, attention_expr_cuda_test.cpp): varlen documents with
// padding and a modifier (built-in or expression), the float64 and plain-bf16 references (a
// test's problems on every core at once), the error metric and bound.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/tensor.h"
#include "layers/attention/attention.h"
#include "layers/attention/expr/expr.h"
#include "tests/gpu/gpu_test_util.h"

namespace driftless::attention_check {

using layers::AttentionGrads;
using layers::AttentionOutputs;
using layers::AttentionSpec;
using layers::ScoreModSpec;

struct Doc {
  int64_t q, k, q_pad = 0, k_pad = 0;
};

struct Case {
  std::string name;
  std::vector<Doc> docs;
  int64_t heads = 2, kv_heads = 1, head_dim = 64;
  bool causal = true;
  int64_t window_left = -1, window_right = -1;
  enum { none, softcap, alibi } mod = none;
  double cap = 30.0;
  // A score expression (ScoreModKind::expression) with its tables, instead of mod.
  std::string expression{};
  std::vector<layers::expr::ParamDecl> decls{};
  layers::PositionShift shift{};  // AttentionSpec::first_doc_shift (a ring call's positions)
  // A mask expression over the same tables (with or without `expression`).
  std::string mask{};
};

struct Problem {
  Tensor q, k, v, dout;  // cpu, f32 (bf16-rounded values unless make's bf16_values is false)
  AttentionSpec spec;
  std::vector<bool> q_pad, k_pad;  // rows that belong to no document
};

// The score_mod of a case with a score and/or mask expression: the checked programs and their
// tables (the attention op's inputs; also what the expression tests prefetch).
inline ScoreModSpec expression_mod(const Case& c) {
  std::vector<Tensor> params;
  for (const layers::expr::ParamDecl& d : c.decls)
    params.push_back(
        Tensor::from_vector(std::vector<float>(d.init.begin(), d.init.end()), Shape(d.shape)));
  return ScoreModSpec::make_expression(
      c.expression.empty() ? nullptr
                           : layers::expr::compile_score_mod(c.expression, c.decls, int(c.heads)),
      c.mask.empty() ? nullptr : layers::expr::compile_mask_mod(c.mask, c.decls, int(c.heads)),
      params);
}

// bf16_values: q, k, v and dout hold bf16-representable values (the bf16 criterion's
// inputs); false: any f32 values (attention_cuda_test.cpp's f32 comparison).
inline Problem make(const Case& c, uint64_t seed, bool bf16_values = true) {
  std::vector<int32_t> cq{0}, ck{0}, uq, uk;
  Problem p;
  bool padded = false;
  for (const Doc& d : c.docs) {
    cq.push_back(int32_t(cq.back() + d.q + d.q_pad));
    ck.push_back(int32_t(ck.back() + d.k + d.k_pad));
    uq.push_back(int32_t(d.q));
    uk.push_back(int32_t(d.k));
    padded = padded || d.q_pad > 0 || d.k_pad > 0;
    p.q_pad.insert(p.q_pad.end(), size_t(d.q), false);
    p.q_pad.insert(p.q_pad.end(), size_t(d.q_pad), true);
    p.k_pad.insert(p.k_pad.end(), size_t(d.k), false);
    p.k_pad.insert(p.k_pad.end(), size_t(d.k_pad), true);
  }
  AttentionSpec& s = p.spec;
  s.cu_seqlens_q = Tensor::from_vector(cq);
  s.cu_seqlens_k = Tensor::from_vector(ck);
  if (padded) {  // FlashAttention 3 convention: offsets in cu_seqlens, lengths in seqused
    s.seqused_q = Tensor::from_vector(uq);
    s.seqused_k = Tensor::from_vector(uk);
  }
  for (const Doc& d : c.docs) {
    s.max_seqlen_q = std::max(s.max_seqlen_q, d.q);
    s.max_seqlen_k = std::max(s.max_seqlen_k, d.k);
  }
  s.max_seqlen_q = std::max<int64_t>(s.max_seqlen_q, 1);
  s.max_seqlen_k = std::max<int64_t>(s.max_seqlen_k, 1);
  s.causal = c.causal;
  s.window_left = c.window_left;
  s.window_right = c.window_right;
  s.first_doc_shift = c.shift;
  if (c.mod == Case::softcap) s.score_mod = ScoreModSpec::make_softcap(c.cap);
  if (c.mod == Case::alibi) {
    std::vector<float> slopes;
    for (int64_t h = 0; h < c.heads; ++h) slopes.push_back(std::pow(2.0f, -float(h + 1)));
    s.score_mod = ScoreModSpec::make_alibi(Tensor::from_vector(slopes));
  }
  if (!c.expression.empty() || !c.mask.empty()) s.score_mod = expression_mod(c);
  const int64_t tq = cq.back(), tk = ck.back();
  auto bf = [bf16_values](Tensor t) { return bf16_values ? t.to(DType::bf16).to(DType::f32) : t; };
  p.q = bf(Tensor::randn({tq, c.heads, c.head_dim}, seed, DType::f32, 0.0, 1.5));
  p.k = bf(Tensor::randn({tk, c.kv_heads, c.head_dim}, seed + 1, DType::f32, 0.0, 1.5));
  p.v = bf(Tensor::randn({tk, c.kv_heads, c.head_dim}, seed + 2, DType::f32));
  p.dout = bf(Tensor::randn({tq, c.heads, c.head_dim}, seed + 3, DType::f32));
  return p;
}

struct Result {
  Tensor t[5];       // out, lse, dq, dk, dv on cpu
  Tensor dparams{};  // learnable expression tables: the flat gradient (dscore_mod) on cpu
};
inline const char* const kNames[5] = {"out", "lse", "dq", "dk", "dv"};

inline Result run(const Problem& p, DType dtype, Device device) {
  auto on = [&](const Tensor& t) { return t.to(device, dtype); };
  Tensor q = on(p.q), k = on(p.k), v = on(p.v), dout = on(p.dout);
  if (device == Device::cuda) testing::poison_cache(3);
  AttentionOutputs f = layers::attention_forward(q, k, v, p.spec);
  if (device == Device::cuda) testing::poison_cache(3);
  AttentionGrads g = layers::attention_backward(q, k, v, p.spec, f.out, f.lse, dout);
  auto cpu = [](const Tensor& t) { return t.defined() ? t.to(Device::cpu) : t; };
  return {{cpu(f.out), cpu(f.lse), cpu(g.dq), cpu(g.dk), cpu(g.dv)}, cpu(g.dscore_mod)};
}

// The plain bf16 reference of the criterion (see the top of the file).
inline Result run_bf16_reference(const Problem& p) {
  auto bf = [](const Tensor& t) { return t.to(DType::bf16); };
  const Tensor q = bf(p.q), k = bf(p.k), v = bf(p.v);
  AttentionOutputs f = layers::attention_forward_bf16_operands(q, k, v, p.spec);
  AttentionGrads g =
      layers::attention_backward_bf16_operands(q, k, v, p.spec, f.out, f.lse, bf(p.dout));
  return {{f.out, f.lse, g.dq, g.dk, g.dv}, g.dscore_mod};
}

// fn(order[0]), fn(order[1]), ... on every core, each call on one thread (the CPU attention
// and make() run on one core; the calls given here share nothing they write); rethrows the
// first failure once every call has ended.
template <class Fn>
void on_every_core(const std::vector<size_t>& order, const Fn& fn) {
  std::atomic<size_t> next{0};
  std::mutex failed_mutex;
  std::exception_ptr failed;
  auto work = [&] {
    for (size_t i = next++; i < order.size(); i = next++) {
      try {
        fn(order[i]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failed_mutex);
        if (!failed) failed = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  const size_t n =
      std::min<size_t>(order.size(), std::max(1u, std::thread::hardware_concurrency()));
  for (size_t i = 0; i < n; ++i) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  if (failed) std::rethrow_exception(failed);
}

// The problem of each case, on the inputs of seeds seed + 10, seed + 20, ... (seed advanced
// past them).
inline std::vector<Problem> make_all(const std::vector<Case>& cases, uint64_t& seed) {
  std::vector<Problem> problems;
  problems.reserve(cases.size());
  for (const Case& c : cases) problems.push_back(make(c, seed += 10));
  return problems;
}

// The float64 reference and the plain bf16 reference (run_bf16_reference) of a problem.
struct References {
  Result f64, bf16;
};

// The references of each problem, the same values as computed one after another: every
// reference (two a problem, which each only read) a task on every core (on_every_core), the
// largest problems' first (T_q x T_k x heads x head_dim), so that a small one starts last.
inline std::vector<References> references(const std::vector<Problem>& problems) {
  std::vector<References> refs(problems.size());
  std::vector<size_t> order(2 * problems.size());  // task t: problem t / 2, f64 if t is even
  std::iota(order.begin(), order.end(), size_t(0));
  auto size = [&](size_t t) {
    return double(problems[t / 2].q.numel()) * double(problems[t / 2].k.size(0));
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return size(a) > size(b); });
  on_every_core(order, [&](size_t t) {
    const Problem& p = problems[t / 2];
    if (t % 2 == 0)
      refs[t / 2].f64 = run(p, DType::f64, Device::cpu);
    else
      refs[t / 2].bf16 = run_bf16_reference(p);
  });
  return refs;
}

// The criterion's bound on the error of tensor i from the bf16 reference's error ec.
inline double bound_of(int i, double ec, bool zero_ref) {
  if (zero_ref) return 1e-5;
  return 2 * ec + (i == 1 ? 1e-6 : 0.0);
}

// max|t - r| / max|r| over finite entries (max|t - r| when r is all 0, *zero_ref then set);
// -inf must match exactly, NaN fails.
inline double err(const Tensor& t, const Tensor& r, const std::string& what, bool* zero_ref) {
  const auto tv = t.to_vector<double>(), rv = r.to_vector<double>();
  EXPECT_EQ(tv.size(), rv.size()) << what;
  double num = 0, den = 0;
  for (size_t i = 0; i < rv.size(); ++i) {
    if (std::isnan(tv[i])) return INFINITY;
    if (std::isinf(rv[i]) || std::isinf(tv[i])) {
      if (tv[i] != rv[i]) return INFINITY;
      continue;
    }
    num = std::max(num, std::abs(tv[i] - rv[i]));
    den = std::max(den, std::abs(rv[i]));
  }
  *zero_ref = den == 0;
  return den > 0 ? num / den : num;
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// Where two tensors of the same shape differ in bits, for a failure message: how many
// elements, the first (flat index, both values, sign bits included) and the largest gap.
inline std::string bits_difference(const Tensor& a, const Tensor& b) {
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  if (av.size() != bv.size()) return "sizes differ";
  int64_t n = 0, first = -1, worst = -1;
  double gap = -1;
  for (size_t i = 0; i < av.size(); ++i) {
    if (std::memcmp(&av[i], &bv[i], sizeof(double)) == 0) continue;
    ++n;
    if (first < 0) first = int64_t(i);
    const double g = std::abs(av[i] - bv[i]);
    if (!(g <= gap)) gap = g, worst = int64_t(i);
  }
  if (n == 0) return "no element differs";
  auto at = [&](int64_t i) {
    std::ostringstream o;
    o << "[" << i << "] " << av[size_t(i)] << (std::signbit(av[size_t(i)]) ? " (sign -)" : "")
      << " vs " << bv[size_t(i)] << (std::signbit(bv[size_t(i)]) ? " (sign -)" : "");
    return o.str();
  };
  std::ostringstream o;
  o << n << " of " << av.size() << " elements differ (shape " << shape_str(a.shape()) << "); first "
    << at(first) << "; largest gap " << at(worst);
  return o.str();
}

// Padded rows: out, dq, dk, dv exactly 0 and lse -inf.
inline void expect_padding(const Problem& p, const Case& c, const Result& g) {
  const auto out = g.t[0].to_vector<double>(), lse = g.t[1].to_vector<double>();
  const auto dq = g.t[2].to_vector<double>(), dk = g.t[3].to_vector<double>();
  const auto dv = g.t[4].to_vector<double>();
  const int64_t D = c.head_dim, tq = int64_t(p.q_pad.size()), tk = int64_t(p.k_pad.size());
  int64_t bad = 0;
  for (int64_t r = 0; r < tq; ++r) {
    if (!p.q_pad[size_t(r)]) continue;
    for (int64_t h = 0; h < c.heads; ++h) {
      bad += lse[size_t(h * tq + r)] != -INFINITY;
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = size_t((r * c.heads + h) * D + d);
        bad += out[i] != 0 || dq[i] != 0;
      }
    }
  }
  for (int64_t r = 0; r < tk; ++r) {
    if (!p.k_pad[size_t(r)]) continue;
    for (int64_t i = r * c.kv_heads * D; i < (r + 1) * c.kv_heads * D; ++i)
      bad += dk[size_t(i)] != 0 || dv[size_t(i)] != 0;
  }
  EXPECT_EQ(bad, 0) << c.name << ": padded rows not written as 0 / -inf";
}

}  // namespace driftless::attention_check
