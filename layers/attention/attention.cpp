// The built-in score modifiers bound to the kernels, and the public entry points of the
// attention op (attention.h). Each (compute type, modifier) pair is its own instantiation
// of the CPU kernels (ARCHITECTURE.md "Score modifiers": kernels instantiated per modifier).
#include "layers/attention/attention.h"

#include "layers/attention/expr/expr_mod.h"

namespace driftless::layers {

namespace {

// Hands the kernels the functor of spec.score_mod for compute type T: the spec bound to its
// description (parameters converted to T on the cpu, alive for the call), then the functor
// of the description.
struct BuiltinBinder {
  static constexpr bool kUserFunctor = false;
  template <class T, class F>
  void operator()(T, const AttentionSpec& spec, F&& f) const {
    const BoundScoreMod<T> m = bind_score_mod<T>(spec.score_mod, Device::cpu);
    if (m.desc.kind == ScoreModKind::expression) {  // host functor: the CPU oracle
      std::vector<const T*> ptrs;
      for (const Tensor& t : m.expression_params) ptrs.push_back(t.template data<T>());
      expr::ExprMod<T> mod;
      mod.score = spec.score_mod.expression.get();
      mod.mask = spec.score_mod.mask.get();
      mod.b.params = ptrs.data();
      mod.b.head_offset = int(spec.score_mod.head_offset);
      f(mod);
      return;
    }
    score_mod::visit_score_mod(m.desc, f);
  }
};

}  // namespace

namespace detail {

std::pair<Tensor, Tensor> learnable_inputs(const AttentionSpec& spec) {
  Tensor table;
  if (spec.score_mod.kind == ScoreModKind::relative_position)
    table = spec.score_mod.relative_position_table;
  return {spec.bias, table};
}

void finish_grads(const AttentionSpec& spec, AttentionGrads& g) {
  if (spec.score_mod.kind != ScoreModKind::relative_position || !g.dscore_mod.defined()) return;
  const Tensor& table = spec.score_mod.relative_position_table;
  g.dscore_mod = g.dscore_mod.reshape(table.shape()).to(table.dtype());
}

}  // namespace detail

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                 AttentionResult* result) {
  return detail::attention_node(q, k, v, spec, BuiltinBinder{}, result);
}

AttentionOutputs attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const AttentionSpec& spec) {
  return detail::forward_impl(q, k, v, spec, BuiltinBinder{});
}

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionSpec& spec, const Tensor& out, const Tensor& lse,
                                  const Tensor& dout) {
  AttentionGrads g = detail::backward_impl(q, k, v, spec, out, lse, dout, BuiltinBinder{});
  detail::finish_grads(spec, g);
  return g;
}

AttentionOutputs attention_forward_bf16_operands(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const AttentionSpec& spec) {
  return detail::forward_impl(q, k, v, spec, BuiltinBinder{}, true);
}

AttentionGrads attention_backward_bf16_operands(const Tensor& q, const Tensor& k, const Tensor& v,
                                                const AttentionSpec& spec, const Tensor& out,
                                                const Tensor& lse, const Tensor& dout) {
  AttentionGrads g = detail::backward_impl(q, k, v, spec, out, lse, dout, BuiltinBinder{}, true);
  detail::finish_grads(spec, g);
  return g;
}

}  // namespace driftless::layers
