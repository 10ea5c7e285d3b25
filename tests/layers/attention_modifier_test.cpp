// Score modifiers and the additive bias against the dense float64 reference: outputs,
// dq/dk/dv and the gradients of learnable inputs (relative-position table, bias, user
// functor parameters). fp32 within 1e-5 (max-norm relative), f64 within 1e-12.
#include <gtest/gtest.h>

#include <limits>

#include "tests/layers/attention_test_util.h"

namespace driftless::testing {
namespace {

constexpr double kTolF32 = 1e-5;
constexpr double kTolF64 = 1e-12;

void check_both(const Case& c) {
  expect_matches_reference(c, DType::f32, kTolF32);
  expect_matches_reference(c, DType::f64, kTolF64);
}

Case base() {
  Case c;
  c.docs = {{65, 65}, {0, 0}, {30, 129}, {7, 7}};
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 16;
  return c;
}

TEST(AttentionModifiers, Softcap) {
  for (bool causal : {true, false}) {
    Case c = base();
    c.mod = ModKind::softcap;
    c.softcap = 1.5;  // small enough that tanh is far from linear
    c.causal = causal;
    check_both(c);
  }
}

TEST(AttentionModifiers, Alibi) {
  for (bool causal : {true, false}) {
    Case c = base();
    c.mod = ModKind::alibi;
    c.causal = causal;
    c.seed = 5;
    check_both(c);
  }
}

TEST(AttentionModifiers, RelativePositionWithTableGradient) {
  for (bool causal : {true, false}) {
    Case c = base();
    c.mod = ModKind::relpos;
    c.max_distance = 6;  // distances beyond 6 share the clipped buckets
    c.causal = causal;
    c.window_left = causal ? 40 : 20;
    c.seed = 6;
    check_both(c);
  }
}

TEST(AttentionModifiers, BiasEveryBroadcast) {
  for (BiasKind b : {BiasKind::full, BiasKind::heads, BiasKind::rows, BiasKind::scalar}) {
    Case c = base();
    c.bias = b;
    c.seed = 10 + uint64_t(b);
    check_both(c);
  }
}

TEST(AttentionModifiers, BiasMinusInfinityMasksWithoutNaN) {
  Case c = base();
  c.bias = BiasKind::full;
  c.causal = false;
  c.tweak = [](Inputs& in) {
    // Row 3 of head 1 sees only -inf scores; row 5 has a few -inf entries.
    const double inf = std::numeric_limits<double>::infinity();
    double* b = in.spec.bias.data<double>();
    const int64_t tq = in.t_q, tk = in.t_k;
    for (int64_t j = 0; j < tk; ++j) b[(1 * tq + 3) * tk + j] = -inf;
    for (int64_t j = 0; j < 10; ++j) b[(0 * tq + 5) * tk + j] = -inf;
    in.ref.bias = in.spec.bias.to_vector<double>();
  };
  check_both(c);
}

TEST(AttentionModifiers, UserFunctorWithParameters) {
  for (bool causal : {true, false}) {
    Case c = base();
    c.mod = ModKind::user;
    c.causal = causal;
    c.seed = 8;
    check_both(c);
  }
}

TEST(AttentionModifiers, EverythingAtOnce) {
  Case c;
  c.docs = {{20, 70, 3, 5}, {0, 0, 2, 0}, {33, 33, 0, 4}, {1, 64, 1, 1}};
  c.heads = 4;
  c.kv_heads = 1;
  c.head_dim = 24;
  c.padding = Padding::padded_cu;
  c.mod = ModKind::softcap;
  c.bias = BiasKind::rows;
  c.window_left = 30;
  c.seed = 21;
  check_both(c);
}

}  // namespace
}  // namespace driftless::testing
