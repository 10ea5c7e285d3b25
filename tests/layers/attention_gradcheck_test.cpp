// Whole-op central finite-difference check of the attention autograd node in float64
// (CONTRIBUTING.md tier 1): q, k, v and the learnable spec inputs (bias, relative-position
// table) on small packed, padded, GQA cases with odd sizes.
#include <gtest/gtest.h>

#include "tests/gradcheck.h"
#include "tests/layers/attention_test_util.h"

namespace driftless::testing {
namespace {

using layers::AttentionSpec;

// f(q, k, v[, bias][, table]) -> out, with the spec's learnable inputs taken from inputs.
GradFn op(const AttentionSpec& spec, bool has_bias, bool has_table) {
  return [spec, has_bias, has_table](const std::vector<Tensor>& in) {
    AttentionSpec s = spec;
    size_t i = 3;
    if (has_bias) s.bias = in[i++];
    if (has_table) s.score_mod.relative_position_table = in[i++];
    return std::vector<Tensor>{layers::attention(in[0], in[1], in[2], s)};
  };
}

void check(const Case& c) {
  Inputs in = make_inputs(c);
  const bool has_bias = in.spec.bias.defined();
  const bool has_table = c.mod == ModKind::relpos;
  std::vector<Tensor> inputs{in.q, in.k, in.v};
  if (has_bias) inputs.push_back(in.spec.bias);
  if (has_table) inputs.push_back(in.spec.score_mod.relative_position_table);
  EXPECT_TRUE(gradcheck(op(in.spec, has_bias, has_table), inputs)) << c.str();
}

Case small() {
  Case c;
  c.docs = {{3, 3, 1, 0}, {0, 0, 0, 1}, {4, 6, 0, 2}, {2, 0, 1, 0}};
  c.padding = Padding::padded_cu;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 5;
  return c;
}

TEST(AttentionGradcheck, CausalPaddedGqa) {
  check(small());
}

TEST(AttentionGradcheck, SoftcapAndBias) {
  Case c = small();
  c.mod = ModKind::softcap;
  c.softcap = 1.0;
  c.bias = BiasKind::rows;
  c.causal = false;
  c.seed = 3;
  check(c);
}

TEST(AttentionGradcheck, RelativePositionTableAndFullBias) {
  Case c = small();
  c.mod = ModKind::relpos;
  c.max_distance = 2;
  c.bias = BiasKind::full;
  c.seed = 4;
  check(c);
}

TEST(AttentionGradcheck, AlibiWindowMqa) {
  Case c = small();
  c.kv_heads = 1;
  c.heads = 3;
  c.mod = ModKind::alibi;
  c.causal = false;
  c.window_left = 1;
  c.window_right = 2;
  c.seed = 5;
  check(c);
}

}  // namespace
}  // namespace driftless::testing
