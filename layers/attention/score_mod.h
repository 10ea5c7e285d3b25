// Score modifiers (ARCHITECTURE.md "Score modifiers"), in one header that the CPU kernels and
// CUDA device code both include: C++17, nothing host-only, every function DL_HOST_DEVICE.
//  * ScoreModKind and ScoreModDesc<T>: the one description of a built-in modifier, its kind
//    and its parameters as plain values and pointers into the memory of the kernels that
//    read them (bind_score_mod, spec.h, makes one from the user-facing ScoreModSpec).
//  * softcap_value, alibi_value, ...: the one implementation of each built-in's value and
//    exact derivative.
//  * The functors None, Softcap, Alibi and RelativePosition: that math in the compile-time
//    form the kernels are instantiated with; visit_score_mod turns a description into its
//    functor. User-written modifiers implement the same interface.
//
// Interface of a modifier M for compute type T (float or double):
//   DL_HOST_DEVICE T value(T score, int b, int h, int q_idx, int k_idx) const;
//   DL_HOST_DEVICE T derivative(T score, int b, int h, int q_idx, int k_idx) const;
//       // d value / d score
// and, only when it has learnable inputs:
//   int64_t param_count() const;   // number of learnable scalars
//   DL_HOST_DEVICE void param_grad(T dvalue, T score, int b, int h, int q_idx, int k_idx,
//                                  T* grad) const;  // grad += dvalue * d value/d params
// Arguments:
//   b      document index within this call (index into cu_seqlens; NOT a global id).
//   h      query head (0..H-1).
//   q_idx  position of the query token within its document, in key coordinates: query row
//          i of n_q rows is at i + n_k - n_q (bottom-right alignment, mask.h).
//   k_idx  position of the key within its document (0..n_k-1); both plus first_doc_shift
//          for document 0 (spec.h "Positions"); q_idx - k_idx is the distance in any layout.
// Composition: masks decide visibility first; a modifier only ever sees visible pairs.
// score = softmax_scale * <q, k> (+ bias[h, row_q, row_k] if a bias tensor is given),
// then value(score, ...), then softmax over the row's visible keys.
#pragma once
#include "layers/attention/host_device.h"
#include "layers/attention/rtc_std.h"

namespace driftless::layers {

// expression: a user expression (layers/attention/expr/); its CPU functor is host code
// (expr_mod.h), so visit_score_mod does not make it; CUDA compiles it at run time (jit/).
enum class ScoreModKind { none, softcap, alibi, relative_position, expression };

// A built-in modifier as the kernels take it. Only the fields of `kind` are read; the
// pointers address memory of the device the kernels run on and are not owned.
template <class T>
struct ScoreModDesc {
  ScoreModKind kind = ScoreModKind::none;
  T softcap = T(0);                            // softcap: the cap, > 0
  const T* alibi_slopes = nullptr;             // alibi: (H), not learnable
  const T* relative_position_table = nullptr;  // relative_position: (H, 2 * max_distance + 1)
  int relative_position_heads = 0;             //   its H
  int relative_position_max_distance = 0;
};

namespace score_mod {

DL_HOST_DEVICE inline float dl_tanh(float x) {
  return ::tanhf(x);
}
DL_HOST_DEVICE inline double dl_tanh(double x) {
  return ::tanh(x);
}

// Softcap: cap * tanh(score / cap) (Gemma 2, FlashAttention's softcap) bounds scores to
// (-cap, cap). Written in terms of t = tanh(score / cap) so that a kernel computing t its
// own way (a faster approximation) shares the rest.
template <class T>
DL_HOST_DEVICE inline T softcap_tanh(T s, T cap) {
  return dl_tanh(s / cap);
}
template <class T>
DL_HOST_DEVICE inline T softcap_value_of_tanh(T t, T cap) {
  return cap * t;
}
template <class T>
DL_HOST_DEVICE inline T softcap_derivative_of_tanh(T t) {
  return T(1) - t * t;
}
template <class T>
DL_HOST_DEVICE inline T softcap_value(T s, T cap) {
  return softcap_value_of_tanh(softcap_tanh(s, cap), cap);
}
template <class T>
DL_HOST_DEVICE inline T softcap_derivative(T s, T cap) {
  return softcap_derivative_of_tanh(softcap_tanh(s, cap));
}

// ALiBi: score - slope[h] * |q_idx - k_idx|. With causal masking this is the usual
// -slope * (q - k); without it the penalty is symmetric.
DL_HOST_DEVICE inline int token_distance(int q, int k) {
  return q >= k ? q - k : k - q;
}
template <class T>
DL_HOST_DEVICE inline T alibi_value(T s, T slope, int q, int k) {
  return s - slope * T(token_distance(q, k));
}
template <class T>
DL_HOST_DEVICE inline T alibi_derivative(T) {
  return T(1);
}

// Learnable relative-position bias: score + table[h, bucket], bucket =
// clamp(q_idx - k_idx, -max_distance, max_distance) + max_distance. d value / d score and
// d value / d table[h, bucket] are both 1.
DL_HOST_DEVICE inline int relative_position_buckets(int max_distance) {
  return 2 * max_distance + 1;
}
DL_HOST_DEVICE inline int relative_position_bucket(int q, int k, int max_distance) {
  int d = q - k;
  d = d < -max_distance ? -max_distance : (d > max_distance ? max_distance : d);
  return d + max_distance;
}
template <class T>
DL_HOST_DEVICE inline T relative_position_value(T s, T table_entry) {
  return s + table_entry;
}
template <class T>
DL_HOST_DEVICE inline T relative_position_derivative(T) {
  return T(1);
}

// The identity: plain softmax attention.
template <class T>
struct None {
  DL_HOST_DEVICE T value(T s, int, int, int, int) const { return s; }
  DL_HOST_DEVICE T derivative(T, int, int, int, int) const { return T(1); }
};

template <class T>
struct Softcap {
  T cap;
  DL_HOST_DEVICE T value(T s, int, int, int, int) const { return softcap_value(s, cap); }
  DL_HOST_DEVICE T derivative(T s, int, int, int, int) const { return softcap_derivative(s, cap); }
};

template <class T>
struct Alibi {
  const T* slopes;  // (H)
  DL_HOST_DEVICE T value(T s, int, int h, int q, int k) const {
    return alibi_value(s, slopes[h], q, k);
  }
  DL_HOST_DEVICE T derivative(T s, int, int, int, int) const { return alibi_derivative(s); }
};

template <class T>
struct RelativePosition {
  const T* table;  // (H, 2 * max_distance + 1) row-major
  int heads;
  int max_distance;
  DL_HOST_DEVICE int num_buckets() const { return relative_position_buckets(max_distance); }
  DL_HOST_DEVICE int index(int h, int q, int k) const {
    return h * num_buckets() + relative_position_bucket(q, k, max_distance);
  }
  DL_HOST_DEVICE T value(T s, int, int h, int q, int k) const {
    return relative_position_value(s, table[index(h, q, k)]);
  }
  DL_HOST_DEVICE T derivative(T s, int, int, int, int) const {
    return relative_position_derivative(s);
  }
  int64_t param_count() const { return int64_t(heads) * num_buckets(); }
  DL_HOST_DEVICE void param_grad(T dvalue, T, int, int h, int q, int k, T* grad) const {
    grad[index(h, q, k)] += dvalue;
  }
};

// Calls f(functor) with the functor of d's kind: the one place a description becomes the
// compile-time modifier a kernel is instantiated with. A kind outside the enum calls nothing
// (bind_score_mod refuses those on the host).
template <class T, class F>
inline void visit_score_mod(const ScoreModDesc<T>& d, F&& f) {
  switch (d.kind) {
    case ScoreModKind::none:
      f(None<T>{});
      return;
    case ScoreModKind::softcap:
      f(Softcap<T>{d.softcap});
      return;
    case ScoreModKind::alibi:
      f(Alibi<T>{d.alibi_slopes});
      return;
    case ScoreModKind::relative_position:
      f(RelativePosition<T>{d.relative_position_table, d.relative_position_heads,
                            d.relative_position_max_distance});
      return;
    case ScoreModKind::expression:
      return;
  }
}

// Whether a modifier has learnable inputs (host-side trait used by the kernels). Only in
// C++20 translation units: nvcc compiles the CUDA kernels as C++17.
#if __cplusplus >= 202002L
template <class M>
concept HasParams = requires(const M& m) {
  {m.param_count()};
};
#endif

}  // namespace score_mod
}  // namespace driftless::layers
