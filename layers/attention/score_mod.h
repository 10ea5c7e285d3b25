// Score modifiers (ARCHITECTURE.md "Score modifiers"): functors mapping a visible, already scaled
// score to a new score, with the derivative the backward needs. The same functors are
// instantiated into the CPU kernels (cpu/flash_cpu.h) and the reference CUDA kernels
// (cuda/flash_cuda.cu: none, softcap, ALiBi); the tensor-core kernels of cuda/fast/ take
// their own log2-domain forms of softcap and ALiBi (fast_common.cuh).
//
// Interface of a modifier M for compute type T (float or double):
//   DL_HOST_DEVICE T value(T score, int b, int h, int q_idx, int k_idx) const;
//   DL_HOST_DEVICE T derivative(T score, int b, int h, int q_idx, int k_idx) const;  // d value/d
//   score
// and, only when it has learnable inputs:
//   int64_t param_count() const;   // number of learnable scalars
//   DL_HOST_DEVICE void param_grad(T dvalue, T score, int b, int h, int q_idx, int k_idx,
//                                  T* grad) const;  // grad += dvalue * d value/d params
// Arguments:
//   b      document index within this call (index into cu_seqlens; NOT a global id).
//   h      query head (0..H-1).
//   q_idx  position of the query token within its document, in key coordinates: query row
//          i of n_q rows is at i + n_k - n_q (bottom-right alignment, mask.h).
//   k_idx  position of the key within its document (0..n_k-1).
// So q_idx - k_idx is the token distance, independent of micro-sequences and padding.
// Composition: masks decide visibility first; a modifier only ever sees visible pairs.
// score = softmax_scale * <q, k> (+ bias[h, row_q, row_k] if a bias tensor is given),
// then value(score, ...), then softmax over the row's visible keys.
#pragma once
#include <math.h>

#include <cstdint>

#include "layers/attention/host_device.h"

namespace driftless::layers::score_mod {

DL_HOST_DEVICE inline float dl_tanh(float x) {
  return ::tanhf(x);
}
DL_HOST_DEVICE inline double dl_tanh(double x) {
  return ::tanh(x);
}

// The identity: plain softmax attention.
template <class T>
struct None {
  DL_HOST_DEVICE T value(T s, int, int, int, int) const { return s; }
  DL_HOST_DEVICE T derivative(T, int, int, int, int) const { return T(1); }
};

// cap * tanh(score / cap) (Gemma 2, FlashAttention's softcap): bounds scores to (-cap, cap).
template <class T>
struct Softcap {
  T cap;
  DL_HOST_DEVICE T value(T s, int, int, int, int) const { return cap * dl_tanh(s / cap); }
  DL_HOST_DEVICE T derivative(T s, int, int, int, int) const {
    T t = dl_tanh(s / cap);
    return T(1) - t * t;
  }
};

// ALiBi: score - slope[h] * |q_idx - k_idx|. With causal masking this is the usual
// -slope * (q - k); without it the penalty is symmetric. slopes: [H], not learnable.
template <class T>
struct Alibi {
  const T* slopes;
  DL_HOST_DEVICE T value(T s, int, int h, int q, int k) const {
    int d = q >= k ? q - k : k - q;
    return s - slopes[h] * T(d);
  }
  DL_HOST_DEVICE T derivative(T, int, int, int, int) const { return T(1); }
};

// Learnable relative-position bias: score + table[h, bucket], bucket =
// clamp(q_idx - k_idx, -max_distance, max_distance) + max_distance;
// table: [H, 2 * max_distance + 1] row-major.
template <class T>
struct RelativePosition {
  const T* table;
  int heads;
  int max_distance;
  DL_HOST_DEVICE int num_buckets() const { return 2 * max_distance + 1; }
  DL_HOST_DEVICE int bucket(int q, int k) const {
    int d = q - k;
    d = d < -max_distance ? -max_distance : (d > max_distance ? max_distance : d);
    return d + max_distance;
  }
  DL_HOST_DEVICE T value(T s, int, int h, int q, int k) const {
    return s + table[h * num_buckets() + bucket(q, k)];
  }
  DL_HOST_DEVICE T derivative(T, int, int, int, int) const { return T(1); }
  int64_t param_count() const { return int64_t(heads) * num_buckets(); }
  DL_HOST_DEVICE void param_grad(T dvalue, T, int, int h, int q, int k, T* grad) const {
    grad[h * num_buckets() + bucket(q, k)] += dvalue;
  }
};

// Whether a modifier has learnable inputs (host-side trait used by the kernels). Only in
// C++20 translation units: nvcc compiles the CUDA kernels as C++17.
#if __cplusplus >= 202002L
template <class M>
concept HasParams = requires(const M& m) {
  {m.param_count()};
};
#endif

}  // namespace driftless::layers::score_mod
