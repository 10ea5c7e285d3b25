// The score modifier of a user expression in the fast kernels' Mod interface (fast_common.cuh):
// U is the functor expr::emit_cuda writes (constants and table pointers as members), compiled
// with the kernels at run time by NVRTC (layers/attention/jit/). Never built ahead of time.
#pragma once
#include "layers/attention/cuda/fast/fast_common.cuh"

namespace driftless::layers::gpu::fast {

// The user's value(score, doc, h, q, k) in log2 units at score = scale * dot, and its
// derivative d value / d score (the kernels apply the softmax scale to dS once at the end,
// as for the built-ins), as U's value_log2 / derivative_dot: functions of the dot product
// whose constant factors, the scale and log2 e included, the host multiplied into U's f[]
// (emit_cuda.cpp; 30 * tanh(score / 30) is then the built-in softcap's arithmetic). h is the call's head (U adds its head_offset); doc is the document
// within the call, q and k positions within the document. The host packs this struct byte
// for byte (jit/attention_program.cpp); the program checks that layout with static_asserts.
// The kernels evaluate the modifier on masked pairs too (then zero their P), where the CPU
// path never calls it: an expression defined only on visible pairs (sqrt(q - k) under causal
// masking) may give NaN there, and dS = P (dP - delta) dx = 0 * NaN would spread it, so a
// derivative that is not finite counts as 0 (on a visible pair the CPU's result is then
// not finite either).
// bound: U's table reads that depend on the head alone (ALiBi's slope[h]), read in bind
// rather than per score; the host packs zeros there.
template <class U>
struct ModExpr {
  U user;
  float scale;
  int h, doc;
  typename U::Bound bound;
  __device__ void bind(int head, int document) {
    h = head;
    doc = document;
    user.bind_into(bound, head);
  }
  __device__ float x(float dot, int q, int k) const {
    return user.value_log2(dot, scale, doc, h, q, k, &bound);
  }
  __device__ float x_dx(float dot, int q, int k, float* dx) const {
    const float d = user.derivative_dot(dot, scale, doc, h, q, k, &bound);
    *dx = fabsf(d) < INFINITY ? d : 0.f;
    return user.value_log2(dot, scale, doc, h, q, k, &bound);
  }
};
// U::kHeavy: the expression calls tanh, exp, log, pow, sqrt or sigmoid (expr::heavy).
template <class U>
struct HeavyMod<ModExpr<U>> {
  static constexpr bool value = U::kHeavy;
};

}  // namespace driftless::layers::gpu::fast
