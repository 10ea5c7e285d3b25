// Gradients of learnable expression tables in the dK/dV kernel (ARCHITECTURE.md "Score
// modifiers"; docs/score-expressions.md "On the GPU"): each (query, key) pair's contribution
// ds * d value / d entry is added in fixed point with integer atomics, so the sum has the
// same bits whatever the order of the adds (training.deterministic holds in both backwards).
#pragma once
#include "engine/core/cuda/launch.cuh"
#include "layers/attention/cuda/fast/fast_attention.h"
#include "layers/attention/rtc_std.h"

namespace driftless::layers::gpu::fast {

// Fixed point in two 64-bit integers per entry: a contribution v is hi 2^-40 + lo 2^-64 with
// hi = round(v 2^40) and lo = round((v 2^40 - hi) 2^24), |lo| <= 2^23. The integers are
// summed modulo 2^64, an associative operation: only the final sums must fit, which holds
// for |d loss / d entry| < 2^23 (hi) and up to 2^40 contributions an entry (lo). Each
// contribution is kept to 2^-64 (round to nearest), so n contributions are summed to within
// n 2^-65 of their exact sum; that sum is then rounded once to f32. A contribution of
// magnitude 2^22 or more, or not finite, sets the overflow word instead, and the gradient
// comes back as NaN (the run's non-finite check reports it) rather than wrapped.
// (kGradSlotBytes, fast_attention.h: the shared bytes of one kept entry, hi and lo; one more
// holds the overflow word.)

// True for a modifier that has learnable tables (ModExpr of an expression that reads one);
// the built-ins and expressions without learnables compile the dK/dV kernel as before.
template <class M, class = void>
struct HasParamGrad {
  static constexpr bool value = false;
};
template <class M>
struct HasParamGrad<M, decltype(void(M::kHasParamGrad))> {
  static constexpr bool value = M::kHasParamGrad;
};

// Tables of an accumulator that get a run in registers (ParamGradAcc below); the rest add
// straight into shared memory. Each run costs a thread five registers for the whole dK/dV
// kernel, so only the first few tables get one. DL_GRAD_RUNS (a run-time compile option,
// jit ProgramSpec::grad_runs) overrides it: 0 adds every contribution on its own, which the
// GPU tests compare the runs against bit for bit.
#ifdef DL_GRAD_RUNS
constexpr int kMaxGradRuns = DL_GRAD_RUNS;
#else
constexpr int kMaxGradRuns = 4;
#endif

// A dK/dV CTA's accumulator of the learnable tables of U (the emitted functor: grad_table(t)
// gives table t's offset, entries and entries a head row). The CTA keeps, per table in turn,
// the rows of its query heads head0 .. head0 + group - 1 (global heads) of a table read by
// h first, else the whole table; each kept entry is a (hi, lo) pair of unsigned 64-bit
// integers (two's complement sums) in shared memory, then comes the overflow word. The
// layout is folded from U's constants.
// Runs: a thread's consecutive contributions to one entry are summed in registers and reach
// shared memory as one atomic pair when the entry changes (or at flush). Expressions such as
// bias[h, min(abs(q - k), 63)] send nearly every pair to one entry, where the CTA's atomics
// would serialise on one address. Each contribution is still rounded to (hi, lo) on its own
// and only the integer additions are regrouped; sums modulo 2^64 do not depend on grouping,
// so the bits are those of one atomic pair per contribution. A table indexed otherwise only
// flushes more often. The kernel calls flush() after its last add, before the barrier that
// precedes param_grad_end (ModExpr, mod_expr.cuh), so no run is left out.
template <class U>
struct ParamGradAcc {
  static constexpr int kRuns = U::kGradTables < kMaxGradRuns ? U::kGradTables : kMaxGradRuns;
  unsigned long long* slots = nullptr;
  int group = 0, head0 = 0;
  // Run r (table r): its slot pair (the kept entry's index) and its sums. A run with zero
  // sums adds nothing when flushed, so the zeroed state is the empty one, whatever its slot.
  static constexpr int kRunArray = kRuns > 0 ? kRuns : 1;
  int run_slot[kRunArray] = {};
  unsigned long long run_hi[kRunArray] = {}, run_lo[kRunArray] = {};

  __device__ __forceinline__ long long kept(int t) const {
    long long offset, numel, per_head;
    U::grad_table(t, offset, numel, per_head);
    return per_head > 0 ? group * per_head : numel;
  }
  // The table entry of table t's first kept entry.
  __device__ __forceinline__ long long first(int t) const {
    long long offset, numel, per_head;
    U::grad_table(t, offset, numel, per_head);
    return per_head > 0 ? (long long)head0 * per_head : 0;
  }
  __device__ __forceinline__ long long base(int t) const {
    long long at = 0;
#pragma unroll
    for (int u = 0; u < t; ++u) at += kept(u);
    return at;
  }
  // Kept entries of every table: the overflow word is slot pair `entries()`'s first word.
  __device__ __forceinline__ long long entries() const {
    return base(U::kGradTables);
  }

  // Table t's entry `flat` (row-major within the table) += ds * d. Masked pairs (ds = 0) add
  // nothing, and a derivative that is not finite counts as 0 (ModExpr::x_dx's rule).
  __device__ __forceinline__ void add(int t, long long flat, float ds, float d) {
    const float v = ds * (fabsf(d) < INFINITY ? d : 0.f);
    if (v == 0.f) return;
    const double x = double(v) * 0x1p40;
    if (!(fabs(x) < 0x1p62)) {  // also NaN (a visible pair's: the CPU's sum is NaN too)
      atomicOr(slots + 2 * entries(), 1ull);
      return;
    }
    const long long hi = __double2ll_rn(x);
    const long long lo = __double2ll_rn((x - double(hi)) * 0x1p24);  // x - hi: exact
    // The kept entry's index: below the shared slots' count, so it fits an int.
    const int slot = int(base(t) + flat - first(t));
    if (t < kRuns) {  // t is a literal of the emitted code: the run is chosen at compile time
      if (run_slot[t] != slot) {
        flush_run(t);
        run_slot[t] = slot;
      }
      run_hi[t] += (unsigned long long)hi;
      run_lo[t] += (unsigned long long)lo;
      return;
    }
    unsigned long long* s = slots + 2 * slot;
    atomicAdd(s, (unsigned long long)hi);
    if (lo != 0) atomicAdd(s + 1, (unsigned long long)lo);
  }

  // Run r's sums into its shared slot pair, then empty (a zero sum adds nothing: the same
  // bits as its adds, which sum to zero modulo 2^64).
  __device__ __forceinline__ void flush_run(int r) {
    unsigned long long* s = slots + 2 * run_slot[r];
    if (run_hi[r] != 0) atomicAdd(s, run_hi[r]);
    if (run_lo[r] != 0) atomicAdd(s + 1, run_lo[r]);
    run_hi[r] = run_lo[r] = 0;
  }
  // Every pending run into shared memory: after the thread's last add, before the barrier
  // that precedes param_grad_end.
  __device__ __forceinline__ void flush() {
#pragma unroll
    for (int r = 0; r < kRuns; ++r) flush_run(r);
  }
};

// The accumulator type of modifier M in the dK/dV kernel (an empty one without learnables).
template <class M, bool = HasParamGrad<M>::value>
struct GradAccOf {
  struct type {};
};
template <class M>
struct GradAccOf<M, true> {
  using type = typename M::GradAcc;
};

// The f32 gradient of the n learnable entries from the fixed-point sums acc = (hi[n], lo[n],
// overflow): one thread an entry, after the dK/dV kernel (launch.cuh's contract).
template <class M>
__global__ void param_grad_to_f32(const unsigned long long* acc, float* out, long long n) {
  cuda::dependent_kernel_begin();
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (acc[2 * n] != 0) {
    out[i] = __int_as_float(0x7fc00000);
    return;
  }
  const double hi = double((long long)acc[i]), lo = double((long long)acc[n + i]);
  out[i] = float(hi * 0x1p-40 + lo * 0x1p-64);
}

}  // namespace driftless::layers::gpu::fast
