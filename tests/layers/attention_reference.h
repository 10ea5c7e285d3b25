// Dense float64 attention reference for the attention tests (CONTRIBUTING.md tier 3: "a
// dense float64 reference built from document ids"). It shares no code with the tiled
// kernels: visibility is an explicit mask from per-row document ids and positions, the
// softmax is a plain two-pass one, and the backward uses rowsum(P * dP) instead of the
// kernels' rowsum(dO * O).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace driftless::testing {

// A score modifier as the reference sees it (arguments as in score_mod.h).
struct RefModifier {
  std::function<double(double s, int b, int h, int q_pos, int k_pos)> value;
  std::function<double(double s, int b, int h, int q_pos, int k_pos)> derivative;
  // Learnable inputs: grad += dvalue * d value / d params.
  int64_t param_count = 0;
  std::function<void(double dvalue, double s, int b, int h, int q_pos, int k_pos,
                     std::vector<double>& grad)>
      param_grad;
};

struct RefProblem {
  // Per memory row: document id (-1: padding) and position within the document (query
  // rows in key coordinates).
  std::vector<int> doc_q, pos_q, doc_k, pos_k;
  int64_t heads = 1, kv_heads = 1, head_dim = 1;
  double scale = 1.0;
  bool causal = false;
  int64_t window_left = -1, window_right = -1;
  std::vector<double> q, k, v;  // (T_q, H, D), (T_k, H_kv, D), (T_k, H_kv, D)
  std::vector<double> bias;     // empty or bias_shape
  int64_t bias_shape[3] = {0, 0, 0};
  RefModifier mod;  // value unset: identity
};

struct RefResult {
  std::vector<double> out, lse, dq, dk, dv, dbias, dparams;
};

// Forward and, when dout is non-empty, backward.
RefResult reference_attention(const RefProblem& p, const std::vector<double>& dout);

}  // namespace driftless::testing
