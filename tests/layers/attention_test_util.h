// Shared helpers of the attention tests: a Case describes documents, heads, masks,
// padding and modifier; make_inputs builds the op's inputs and the dense reference's view
// of the same problem; expect_matches_reference runs both and compares every output.
// Relative error is max|t - r| / max|r| over a whole tensor (max-norm; absolute when r is
// all zero), the strictest of the usual choices for a tensor whose entries vary in size.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "layers/attention/attention.h"
#include "tests/layers/attention_reference.h"

namespace driftless::testing {

struct Inputs;

struct DocLen {
  int64_t q, k;
  int64_t q_pad = 0, k_pad = 0;  // rows of padding after the document's real rows
};

enum class Padding { none, padded_cu, seqused };
enum class ModKind { none, softcap, alibi, relpos, user };
// Bias shapes: full (H, T_q, T_k); heads (1, T_q, T_k); rows (H, 1, T_k); scalar (1, 1, 1).
enum class BiasKind { none, full, heads, rows, scalar };

struct Case {
  std::vector<DocLen> docs;
  int64_t heads = 2, kv_heads = 1, head_dim = 32;
  bool causal = true;
  int64_t window_left = -1, window_right = -1;
  Padding padding = Padding::none;
  ModKind mod = ModKind::none;
  BiasKind bias = BiasKind::none;
  double softcap = 2.0;
  int64_t max_distance = 6;
  std::optional<double> scale;
  uint64_t seed = 1;
  // Edits the built inputs (op and reference alike) before the run, e.g. to poison rows.
  std::function<void(Inputs&)> tweak;
  std::string str() const;
};

// A learnable per-head temperature, value = w[h] * s: the user-functor path with params.
struct PerHeadTemperature {
  const float* wf = nullptr;
  const double* wd = nullptr;
  int heads = 0;
  template <class T>
  const T* w() const {
    if constexpr (std::is_same_v<T, float>)
      return wf;
    else
      return wd;
  }
  template <class T>
  T value(T s, int, int h, int, int) const {
    return w<T>()[h] * s;
  }
  template <class T>
  T derivative(T, int, int h, int, int) const {
    return w<T>()[h];
  }
  int64_t param_count() const { return heads; }
  template <class T>
  void param_grad(T dvalue, T s, int, int h, int, int, T* grad) const {
    grad[h] += dvalue * s;
  }
};

struct Inputs {
  Tensor q, k, v, dout;        // f64
  Tensor temperature;          // (H) f64, for ModKind::user
  layers::AttentionSpec spec;  // bias / table / slopes in f64
  RefProblem ref;
  int64_t t_q = 0, t_k = 0;
};

Inputs make_inputs(const Case& c);
// The spec with its floating tensors (bias, modifier inputs) converted to dtype.
layers::AttentionSpec spec_in(const layers::AttentionSpec& spec, DType dtype);

// max|t - r| / max(max|r|, floor).
double rel_error(const std::vector<double>& t, const std::vector<double>& r, double floor = 0.0);

// Runs the op in dtype (forward and backward) and the reference; checks every output
// within tol, LSE -inf exactly where the reference has it, no NaN, and exact zeros in
// padded rows and rows that see no key.
void expect_matches_reference(const Case& c, DType dtype, double tol);

}  // namespace driftless::testing
