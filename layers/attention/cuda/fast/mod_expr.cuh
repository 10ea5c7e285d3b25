// The score modifier of a user expression in the fast kernels' Mod interface (fast_common.cuh):
// U is the functor expr::emit_cuda writes (constants and table pointers as members), compiled
// with the kernels at run time by NVRTC (layers/attention/jit/). Never built ahead of time.
#pragma once
#include "layers/attention/cuda/fast/fast_common.cuh"
#include "layers/attention/cuda/fast/param_grad.cuh"

namespace driftless::layers::gpu::fast {

// ModExpr's mask V: the emitted mask functor (expr::emit_cuda of a mask_mod: its own constants,
// the same tables), or NoMask. A hidden pair's value is -inf with derivative 0, which the
// kernels treat as they treat the causal and window masks (P = 0; a row that sees nothing gets
// out 0 and lse -inf), and it adds nothing to learnable tables. It is ModExpr's last member, so
// the score functor's offsets do not depend on it (jit/attention_program.cpp mod_layout).
struct NoMask {
  __device__ bool visible(int, int, int, int) const { return true; }
};

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
// Learnable tables (U::kHasParamGrad): the dK/dV kernel adds each pair's d loss / d entry
// through param_grad into a CTA accumulator (param_grad.cuh) over the entries its query
// heads can read (U::grad_table: a table subscripted by h first keeps group rows, another
// the whole table), then into U::grad_acc, the call's (hi, lo, overflow) sums.
// q_shift, k_shift: the call's AttentionSpec::first_doc_shift (an op-level call over part of
// a document; no route makes one): added to the positions of document 0 (qs, ks, set by bind)
// in a program compiled with DL_DOC_SHIFT, so that the user sees positions in the document,
// as on the CPU.
template <class U, class V = NoMask>
struct ModExpr {
  U user;
  float scale;
  int h, doc;
  int q_shift, k_shift;
  int qs, ks;
  typename U::Bound bound;
  V mask;
  __device__ void bind(int head, int document) {
    h = head;
    doc = document;
    qs = document == 0 ? q_shift : 0;
    ks = document == 0 ? k_shift : 0;
    user.bind_into(bound, head);
  }
  // Document positions: plus the shift on document 0 only in a program compiled for calls
  // that shift (DL_DOC_SHIFT, jit ProgramSpec::shifted); in the others (every route's calls)
  // no per-pair addition.
#ifdef DL_DOC_SHIFT
  static constexpr bool kShifted = true;
#else
  static constexpr bool kShifted = false;
#endif
  __device__ __forceinline__ int qpos(int q) const {
    if constexpr (kShifted)
      return q + qs;
    else
      return q;
  }
  __device__ __forceinline__ int kpos(int k) const {
    if constexpr (kShifted)
      return k + ks;
    else
      return k;
  }
  __device__ bool visible(int q, int k) const { return mask.visible(doc, h, qpos(q), kpos(k)); }
  __device__ float x(float dot, int q, int k) const {
    if (!visible(q, k)) return -INFINITY;
    return user.value_log2(dot, scale, doc, h, qpos(q), kpos(k), &bound);
  }
  __device__ float x_dx(float dot, int q, int k, float* dx) const {
    if (!visible(q, k)) {
      *dx = 0.f;
      return -INFINITY;
    }
    return x_dx_shown(dot, q, k, dx);
  }
  // x, x_dx and param_grad on a pair the host proved the mask shows (a block inside the
  // tile's visible range, fast_common.cuh with_visible_block): the mask is not evaluated.
  __device__ float x_shown(float dot, int q, int k) const {
    return user.value_log2(dot, scale, doc, h, qpos(q), kpos(k), &bound);
  }
  __device__ float x_dx_shown(float dot, int q, int k, float* dx) const {
    const float d = user.derivative_dot(dot, scale, doc, h, qpos(q), kpos(k), &bound);
    *dx = fabsf(d) < INFINITY ? d : 0.f;
    return user.value_log2(dot, scale, doc, h, qpos(q), kpos(k), &bound);
  }

  static constexpr bool kHasParamGrad = U::kHasParamGrad;
  using GradAcc = ParamGradAcc<U>;
  // The accumulator of the call's query heads head0 .. head0 + group - 1 at smem, zeroed by
  // the CTA's threads (the caller synchronises before the first add).
  __device__ GradAcc param_grad_begin(unsigned long long* smem, int head0, int group) const {
    GradAcc a;
    a.slots = smem;
    a.group = group;
    a.head0 = head0 + user.head_offset;
    const long long words = 2 * (a.entries() + 1);
    for (long long i = threadIdx.x; i < words; i += blockDim.x) smem[i] = 0;
    return a;
  }
  // ds: d loss / d value of the pair (before the softmax scale, as x_dx's value). Inlined, so
  // that the accumulator's runs stay in the kernel's registers.
  __device__ __forceinline__ void param_grad(float ds, float dot, int q, int k,
                                             GradAcc& acc) const {
    if (!visible(q, k)) return;
    param_grad_shown(ds, dot, q, k, acc);
  }
  __device__ void param_grad_shown(float ds, float dot, int q, int k, GradAcc& acc) const {
    user.param_grad(ds, dot * scale, doc, h, qpos(q), kpos(k), acc);
  }
  // After every add of the CTA (each thread's acc.flush(), then a barrier): its nonzero sums
  // into grad_acc = (hi[n], lo[n], overflow), one integer atomic each.
  __device__ void param_grad_end(const GradAcc& acc) const {
    const long long n = user.param_count();
#pragma unroll
    for (int t = 0; t < U::kGradTables; ++t) {
      long long offset, numel, per_head;
      U::grad_table(t, offset, numel, per_head);
      const long long kept = acc.kept(t), base = acc.base(t), first = offset + acc.first(t);
      for (long long e = threadIdx.x; e < kept; e += blockDim.x) {
        const unsigned long long hi = acc.slots[2 * (base + e)], lo = acc.slots[2 * (base + e) + 1];
        if (hi != 0) atomicAdd(user.grad_acc + first + e, hi);
        if (lo != 0) atomicAdd(user.grad_acc + n + first + e, lo);
      }
    }
    if (threadIdx.x == 0 && acc.slots[2 * acc.entries()] != 0)
      atomicOr(user.grad_acc + 2 * n, 1ull);
  }
};
// U::kHeavy: the expression calls tanh, exp, log, pow, sqrt or sigmoid (expr::heavy).
template <class U, class V>
struct HeavyMod<ModExpr<U, V>> {
  static constexpr bool value = U::kHeavy;
};
// A mask's tiles are narrowed, and given visible ranges, by the host (attention_cuda.cpp
// narrow_tiles_by_mask).
template <class U, class V>
struct NarrowsTiles<ModExpr<U, V>> {
  static constexpr bool value = true;
};
template <class U>
struct NarrowsTiles<ModExpr<U, NoMask>> {
  static constexpr bool value = false;
};

}  // namespace driftless::layers::gpu::fast
