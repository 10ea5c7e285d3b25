// Varlen attention, the op (ARCHITECTURE.md "Attention op"): q (T_q, H, D), k / v (T_k, H_kv, D)
// in THD layout with documents given by an AttentionSpec (spec.h), H % H_kv == 0 (GQA/MQA
// without replicating K/V). attention() is one autograd node that saves its own LSE;
// attention_forward / attention_backward are the same computation without autograd, for
// the replay command and for comparing backends.
//
// Dtypes: f32 computes and accumulates in f32 and returns an f32 LSE; bf16 is computed in
// f32 (inputs widened, results rounded back); f64 computes in f64 and returns an f64 LSE
// (the finite-difference oracle). LSE is (H, T_q): -inf for rows that see no key and for
// padded rows, whose out is 0. Composition of masks, bias and modifier: see score_mod.h.
#pragma once
#include <string>
#include <utility>

#include "engine/autograd/autograd.h"
#include "engine/ops/cuda/entry.h"
#include "layers/attention/cpu/flash_cpu.h"
#include "layers/attention/score_mod.h"
#include "layers/attention/spec.h"

namespace driftless::layers {

struct AttentionResult {
  Tensor lse;  // (H, T_q) of the call
};

struct AttentionOutputs {
  Tensor out;  // (T_q, H, D), dtype of q
  Tensor lse;  // (H, T_q), f32 (f64 for f64 inputs)
};

// On cuda, when q, k and v are the column blocks of one (T, (H + 2 H_kv) D) tensor (the
// fused QKV product), dq, dk and dv come back as the same blocks of one fresh buffer: strided
// views, not packed rows (ops::split joins them with no copy).
struct AttentionGrads {
  Tensor dq;     // (T_q, H, D)
  Tensor dk;     // (T_k, H_kv, D): summed over each group's query heads
  Tensor dv;     // (T_k, H_kv, D)
  Tensor dbias;  // shape and dtype of spec.bias, when given
  // Gradient of the modifier's learnable inputs: the relative-position table's shape for
  // the built-in; flat (param_count) in the compute dtype for a user functor with params.
  Tensor dscore_mod;
};

// Built-in modifiers (spec.score_mod).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                 AttentionResult* result = nullptr);
AttentionOutputs attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const AttentionSpec& spec);
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const AttentionSpec& spec, const Tensor& out, const Tensor& lse,
                                  const Tensor& dout);

// FlashAttention's plain bf16 reference, the bound of the tensor-core kernels' tests
// (CONTRIBUTING.md "Numerical tolerances"): the CPU kernels on bf16 inputs with P and dS
// rounded to bf16 where they enter a matrix product, as in the kernels (and in PyTorch's bf16
// ops); sums, row statistics and accumulation in f32. Built-in modifiers; tensors on cpu.
AttentionOutputs attention_forward_bf16_operands(const Tensor& q, const Tensor& k, const Tensor& v,
                                                 const AttentionSpec& spec);
AttentionGrads attention_backward_bf16_operands(const Tensor& q, const Tensor& k, const Tensor& v,
                                                const AttentionSpec& spec, const Tensor& out,
                                                const Tensor& lse, const Tensor& dout);

namespace detail {

constexpr const char* kOp = "attention";

// A binder hands the kernels the modifier functor for a compute type:
// bind(T{}, spec, f) calls f(mod) with mod's value/derivative taking T.
inline DType compute_dtype(DType io) {
  return io == DType::f64 ? DType::f64 : DType::f32;
}

template <class T>
cpu::Problem<T> make_problem(const ResolvedAttention& r, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& bias) {
  cpu::Problem<T> p;
  p.r = &r;
  p.q = q.data<T>();
  p.k = k.data<T>();
  p.v = v.data<T>();
  if (bias.defined()) {
    p.bias.data = bias.data<T>();
    p.bias.stride_k = bias.size(2) == 1 ? 0 : 1;
    p.bias.stride_q = bias.size(1) == 1 ? 0 : bias.size(2);
    p.bias.stride_h = bias.size(0) == 1 ? 0 : bias.size(1) * bias.size(2);
  }
  return p;
}

inline Tensor as_compute(const Tensor& t, DType ct) {
  return t.defined() ? t.to(Device::cpu, ct).contiguous() : Tensor();
}

// The CUDA path (attention_cuda.cpp; DL_CUDA_ENTRY: without CUDA in the build these
// throw). Built-in modifiers none, softcap and ALiBi; f32 and bf16.
DL_CUDA_ENTRY(AttentionOutputs cuda_forward(const ResolvedAttention& r, const Tensor& q,
                                            const Tensor& k, const Tensor& v,
                                            const AttentionSpec& spec))
DL_CUDA_ENTRY(AttentionGrads cuda_backward(const ResolvedAttention& r, const Tensor& q,
                                           const Tensor& k, const Tensor& v,
                                           const AttentionSpec& spec, const Tensor& out,
                                           const Tensor& lse, const Tensor& dout))

// The one place that picks the backend of a call: true for cuda (every tensor must then be
// on cuda, and the modifier must be a built-in or an expression), false for the CPU kernels.
template <class Binder>
bool use_cuda(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  DL_CHECK(k.device() == q.device() && v.device() == q.device(), kOp,
           "q, k, v must be on one device, got " << device_name(q.device()) << ", "
                                                 << device_name(k.device()) << ", "
                                                 << device_name(v.device()));
  if (q.device() != Device::cuda) return false;
  // Score and mask expressions run on CUDA (compiled at run time: jit/; bf16 with head_dim
  // 64 or 128, which the CUDA path checks).
  DL_CHECK(!Binder::kUserFunctor, kOp,
           "user score modifiers are not on cuda yet; use a built-in modifier or cpu tensors");
  // The built-in CUDA modifiers give document 0 the call's own positions; a score expression
  // takes the shift (jit ModExpr).
  DL_CHECK(spec.first_doc_shift.zero() || !reads_positions(spec.score_mod) ||
               spec.score_mod.kind == ScoreModKind::expression,
           kOp,
           "a call with first_doc_shift (" << spec.first_doc_shift.q << ", "
                                           << spec.first_doc_shift.k << ") and the built-in "
                                           << score_mod_name(spec.score_mod.kind)
                                           << " runs on CPU only (the CUDA kernels' built-ins do "
                                              "not shift positions; write it as an expression)");
  return true;
}

// bf16_operands: Problem::bf16_operands (the reference above; bf16 tensors on cpu only).
inline void check_bf16_operands(const Tensor& q, bool bf16_operands) {
  DL_CHECK(!bf16_operands || (q.device() == Device::cpu && q.dtype() == DType::bf16), kOp,
           "the bf16-operand reference takes bf16 tensors on cpu");
}

template <class Binder>
AttentionOutputs forward_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                              const AttentionSpec& spec, const Binder& bind,
                              bool bf16_operands = false) {
  const ResolvedAttention r = validate(spec, q, k, v);
  check_bf16_operands(q, bf16_operands);
  if (use_cuda<Binder>(q, k, v, spec)) return cuda_forward(r, q, k, v, spec);
  const DType ct = compute_dtype(q.dtype());
  return visit_dtype(ct, [&](auto tag) -> AttentionOutputs {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      Tensor qc = as_compute(q, ct), kc = as_compute(k, ct), vc = as_compute(v, ct);
      Tensor bc = as_compute(spec.bias, ct);
      Tensor out = Tensor::zeros({r.t_q, r.heads, r.head_dim}, ct);
      Tensor lse = Tensor::full({r.heads, r.t_q}, -std::numeric_limits<double>::infinity(), ct);
      cpu::Problem<T> p = make_problem<T>(r, qc, kc, vc, bc);
      p.bf16_operands = bf16_operands;
      bind(T{}, spec,
           [&](const auto& mod) { cpu::flash_forward<T>(p, mod, out.data<T>(), lse.data<T>()); });
      return {out.to(q.dtype()), lse};
    } else {
      DL_FAIL(kOp, "unreachable compute dtype");
    }
  });
}

template <class Binder>
AttentionGrads backward_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                             const AttentionSpec& spec, const Tensor& out, const Tensor& lse,
                             const Tensor& dout, const Binder& bind, bool bf16_operands = false) {
  const ResolvedAttention r = validate(spec, q, k, v);
  check_bf16_operands(q, bf16_operands);
  const bool on_cuda = use_cuda<Binder>(q, k, v, spec);
  const Shape qs{r.t_q, r.heads, r.head_dim};
  DL_CHECK(out.defined() && out.shape() == qs, kOp,
           "out must be " << shape_str(qs) << ", got "
                          << (out.defined() ? shape_str(out.shape()) : "undefined"));
  DL_CHECK(dout.defined() && dout.shape() == qs, kOp,
           "d_out must be " << shape_str(qs) << ", got "
                            << (dout.defined() ? shape_str(dout.shape()) : "undefined"));
  DL_CHECK(lse.defined() && lse.shape() == Shape({r.heads, r.t_q}), kOp,
           "lse must be (H, T_q) = (" << r.heads << ", " << r.t_q << "), got "
                                      << (lse.defined() ? shape_str(lse.shape()) : "undefined"));
  if (on_cuda) return cuda_backward(r, q, k, v, spec, out, lse, dout);
  const DType ct = compute_dtype(q.dtype());
  return visit_dtype(ct, [&](auto tag) -> AttentionGrads {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      Tensor qc = as_compute(q, ct), kc = as_compute(k, ct), vc = as_compute(v, ct);
      Tensor bc = as_compute(spec.bias, ct);
      Tensor oc = as_compute(out, ct), doc = as_compute(dout, ct), lc = as_compute(lse, ct);
      Tensor dq = Tensor::zeros(qs, ct), dk = Tensor::zeros(k.shape(), ct),
             dv = Tensor::zeros(k.shape(), ct);
      Tensor dbias = bc.defined() ? Tensor::zeros(bc.shape(), ct) : Tensor();
      Tensor dparams;
      cpu::Problem<T> p = make_problem<T>(r, qc, kc, vc, bc);
      p.bf16_operands = bf16_operands;
      bind(T{}, spec, [&](const auto& mod) {
        T* dp = nullptr;
        if constexpr (score_mod::HasParams<std::decay_t<decltype(mod)>>) {
          dparams = Tensor::zeros({int64_t(mod.param_count())}, ct);
          dp = dparams.data<T>();
        }
        cpu::flash_backward<T>(p, mod, oc.data<T>(), doc.data<T>(), lc.data<T>(), dq.data<T>(),
                               dk.data<T>(), dv.data<T>(),
                               dbias.defined() ? dbias.data<T>() : nullptr, dp);
      });
      AttentionGrads g{dq.to(q.dtype()), dk.to(k.dtype()), dv.to(v.dtype()), Tensor(), dparams};
      if (dbias.defined()) g.dbias = dbias.to(spec.bias.dtype());
      return g;
    } else {
      DL_FAIL(kOp, "unreachable compute dtype");
    }
  });
}

// Learnable inputs of the spec that autograd differentiates: bias and the relative-position
// table (undefined when absent).
std::pair<Tensor, Tensor> learnable_inputs(const AttentionSpec& spec);
// Shapes dscore_mod like the built-in modifier's learnable input.
void finish_grads(const AttentionSpec& spec, AttentionGrads& g);

template <class Binder>
Tensor attention_node(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                      const Binder& bind, AttentionResult* result) {
  AttentionOutputs f = forward_impl(q, k, v, spec, bind);
  if (result) result->lse = f.lse;
  auto [bias, table] = learnable_inputs(spec);
  // The node keeps its own copy of the spec, with learnable inputs detached (no cycles).
  AttentionSpec saved = spec;
  if (bias.defined()) saved.bias = bias.detach();
  if (table.defined()) saved.score_mod.relative_position_table = table.detach();
  std::vector<Tensor> inputs{q, k, v, bias, table};
  for (Tensor& t : saved.score_mod.expression_params) t = t.detach();
  for (const Tensor& t : expression_learnables(spec.score_mod)) inputs.push_back(t);
  autograd::Context ctx;
  ctx.save_for_backward({q, k, v, f.out, f.lse});
  ctx.data() = std::move(saved);
  return autograd::record(
      "attention", inputs, f.out, std::move(ctx),
      [bind](autograd::Context& c, const std::vector<Tensor>& grads) -> std::vector<Tensor> {
        const std::vector<Tensor>& s = c.saved_tensors();
        const AttentionSpec& sp = std::any_cast<AttentionSpec&>(c.data());
        AttentionGrads g = backward_impl(s[0], s[1], s[2], sp, s[3], s[4], grads[0], bind);
        finish_grads(sp, g);
        Tensor dtable =
            sp.score_mod.kind == ScoreModKind::relative_position ? g.dscore_mod : Tensor();
        std::vector<Tensor> out{g.dq, g.dk, g.dv, g.dbias, dtable};
        for (Tensor& t : split_expression_grad(sp.score_mod, g.dscore_mod)) out.push_back(t);
        return out;
      });
}

// Binder of a user functor: the same object for every compute type.
template <class Mod>
struct UserBinder {
  static constexpr bool kUserFunctor = true;
  Mod mod;
  template <class T, class F>
  void operator()(T, const AttentionSpec& spec, F&& f) const {
    DL_CHECK(spec.score_mod.kind == ScoreModKind::none, kOp,
             "a user score modifier replaces spec.score_mod, which must be none, got "
                 << score_mod_name(spec.score_mod.kind));
    f(mod);
  }
};

}  // namespace detail

// User-defined modifiers (score_mod.h interface). Write value/derivative (and param_grad)
// as member templates, or for the compute type of the call (float for f32/bf16, double
// for f64). spec.score_mod must be none. Gradients of user-functor parameters come back
// from attention_backward_with as a flat tensor; attention_with does not route them.
template <class Mod>
AttentionOutputs attention_forward_with(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const AttentionSpec& spec, const Mod& mod) {
  return detail::forward_impl(q, k, v, spec, detail::UserBinder<Mod>{mod});
}
template <class Mod>
AttentionGrads attention_backward_with(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const AttentionSpec& spec, const Tensor& out,
                                       const Tensor& lse, const Tensor& dout, const Mod& mod) {
  return detail::backward_impl(q, k, v, spec, out, lse, dout, detail::UserBinder<Mod>{mod});
}
template <class Mod>
Tensor attention_with(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec,
                      const Mod& mod, AttentionResult* result = nullptr) {
  return detail::attention_node(q, k, v, spec, detail::UserBinder<Mod>{mod}, result);
}

}  // namespace driftless::layers
