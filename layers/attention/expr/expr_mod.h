// The CPU functor of a score/mask expression (score_mod.h interface, plus visible() for a
// mask): what the CPU kernels are instantiated with for ScoreModKind::expression. Host only;
// the CUDA kernels get emit_cuda's source of the same math instead.
#pragma once
#include <cmath>
#include <limits>
#include <vector>

#include "layers/attention/expr/expr.h"

namespace driftless::layers::expr {

template <class T>
struct ExprMod {
  const Program* score = nullptr;  // null: the identity
  const Program* mask = nullptr;   // null: every pair the spec's masks leave visible
  Bindings<T> b;                   // b.params: one pointer per declared parameter

  // A value that is not finite is NaN: the kernels carry it into the row's output (and the
  // loss, which the run's non-finite policy counts) instead of taking it for a hidden pair.
  T value(T s, int, int h, int q, int k) const {
    if (!score) return s;
    const T v = eval_real(*score->root, b, s, h + int64_t(b.head_offset), q, k);
    return std::isfinite(v) ? v : std::numeric_limits<T>::quiet_NaN();
  }
  T derivative(T s, int, int h, int q, int k) const {
    return score ? eval_real(*score->d_score, b, s, h + int64_t(b.head_offset), q, k) : T(1);
  }
  int64_t param_count() const { return score ? score->param_count : 0; }
  // grad (param_count) += dvalue * d value / d entry, for each learnable entry the pair reads.
  void param_grad(T dvalue, T s, int, int h, int q, int k, T* grad) const {
    if (!score) return;
    const int64_t hg = h + int64_t(b.head_offset);
    for (size_t i = 0; i < score->occurrences.size(); ++i) {
      const Node& o = *score->occurrences[i];
      const int64_t at = score->grad_offset[size_t(o.param)] + param_index(o, b, s, hg, q, k);
      grad[at] += dvalue * eval_real(*score->d_occurrence[i], b, s, hg, q, k);
    }
  }
  bool visible(int, int h, int q, int k) const {
    return !mask || eval_bool(*mask->root, b, T(0), h + int64_t(b.head_offset), q, k);
  }
};

}  // namespace driftless::layers::expr
