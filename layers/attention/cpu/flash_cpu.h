// The CPU varlen attention kernels: FlashAttention's tiled online softmax forward and the
// backward that recomputes P from the saved LSE (dS = P * (dP - rowsum(dO * O))). They are
// the reference the CUDA kernels are held to, so they favour exactness and a fixed
// reduction order (deterministic) over speed. Templated on the compute type T (float or
// double: all accumulation happens in T) and on the score modifier (score_mod.h). With
// Problem::bf16_operands the matrix products take P and dS as bf16 operands, as tensor-core
// kernels do: FlashAttention's plain bf16 reference (attention.h).
// Tensors are raw contiguous arrays: q (T_q, H, D), k and v (T_k, H_kv, D), lse (H, T_q).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/core/dtype.h"
#include "layers/attention/mask.h"
#include "layers/attention/score_mod.h"
#include "layers/attention/spec.h"

namespace driftless::layers::cpu {

// Tile sizes. Tests use lengths on both sides of every multiple of these.
constexpr int64_t kBlockQ = 32;
constexpr int64_t kBlockK = 64;

// Additive bias (H|1, T_q|1, T_k|1), contiguous; a stride of 0 broadcasts that dim. The
// gradient buffer of the bias uses the same strides.
template <class T>
struct BiasView {
  const T* data = nullptr;
  int64_t stride_h = 0, stride_q = 0, stride_k = 0;
  int64_t index(int64_t h, int64_t i, int64_t j) const {
    return h * stride_h + i * stride_q + j * stride_k;
  }
};

template <class T>
struct Problem {
  const ResolvedAttention* r = nullptr;
  const T* q = nullptr;  // (T_q, H, D)
  const T* k = nullptr;  // (T_k, H_kv, D)
  const T* v = nullptr;  // (T_k, H_kv, D)
  BiasView<T> bias;
  // P and dS rounded to bf16 where they enter a product (P V, P^T dO, dS K, dS^T Q); their
  // row sums, the statistics and every accumulation stay in T.
  bool bf16_operands = false;
};

// A modifier with a mask (expression masks, expr_mod.h): visible(b, h, q_idx, k_idx) hides
// pairs inside the range the spec's masks leave; it can only hide, never reveal.
template <class M>
concept HasMask = requires(const M& m) {
  {m.visible(0, 0, 0, 0)};
};

namespace detail {

template <class T>
inline T dot(const T* a, const T* b, int64_t n) {
  T s = 0;
  for (int64_t d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// The score of a visible pair before the modifier: scale * <q, k> (+ bias).
template <class T>
inline T pre_score(const Problem<T>& p, const T* qrow, const T* krow, int64_t h, int64_t row_q,
                   int64_t row_k) {
  T s = dot(qrow, krow, p.r->head_dim) * T(p.r->scale);
  if (p.bias.data) s += p.bias.data[p.bias.index(h, row_q, row_k)];
  return s;
}

// The shift of document b's positions (spec.h "Positions"): the call's, for document 0.
inline PositionShift position_shift(const ResolvedAttention& r, size_t b) {
  return b == 0 ? r.first_doc_shift : PositionShift{};
}

// x as a product operand: rounded to bf16 under Problem::bf16_operands.
template <class T>
inline T operand(const Problem<T>& p, T x) {
  return p.bf16_operands ? T(float(bf16(float(x)))) : x;
}

}  // namespace detail

// out: (T_q, H, D) zero-filled by the caller; lse: (H, T_q) filled with -inf by the caller.
// Only real rows are written, so padded rows and rows that see no key stay 0 / -inf.
template <class T, class Mod>
void flash_forward(const Problem<T>& p, const Mod& mod, T* out, T* lse) {
  const ResolvedAttention& r = *p.r;
  const int64_t H = r.heads, Hkv = r.kv_heads, D = r.head_dim, group = H / Hkv;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  std::vector<T> acc(size_t(kBlockQ * D)), m(kBlockQ), l(kBlockQ), s(kBlockK);
  std::vector<int64_t> lo(kBlockQ), hi(kBlockQ);
  for (size_t b = 0; b < r.docs.size(); ++b) {
    const DocSpan& doc = r.docs[b];
    const PositionShift shift = detail::position_shift(r, b);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / group;
      for (int64_t i0 = 0; i0 < doc.q_len; i0 += kBlockQ) {
        const int64_t rows = std::min(kBlockQ, doc.q_len - i0);
        int64_t kmin = std::numeric_limits<int64_t>::max(), kmax = -1;
        for (int64_t t = 0; t < rows; ++t) {
          visible_keys(i0 + t, doc.q_len, doc.k_len, r.causal, r.window_left, r.window_right,
                       &lo[t], &hi[t]);
          if (lo[t] <= hi[t]) {
            kmin = std::min(kmin, lo[t]);
            kmax = std::max(kmax, hi[t]);
          }
          m[t] = neg_inf;
          l[t] = 0;
        }
        if (kmax < 0) continue;  // no row of this tile sees a key
        std::fill(acc.begin(), acc.end(), T(0));
        // Key tiles in order; the running max / sum per row make the result independent
        // of how the keys are cut, up to rounding.
        for (int64_t j0 = kmin / kBlockK * kBlockK; j0 <= kmax; j0 += kBlockK) {
          for (int64_t t = 0; t < rows; ++t) {
            const int64_t jl = std::max(lo[t], j0), jh = std::min(hi[t], j0 + kBlockK - 1);
            if (jl > jh) continue;
            const int64_t row_q = doc.q_offset + i0 + t;
            const T* qrow = p.q + (row_q * H + h) * D;
            const int qpos = int(query_position(i0 + t, doc.q_len, doc.k_len) + shift.q);
            T tile_max = neg_inf;
            for (int64_t j = jl; j <= jh; ++j) {
              const int64_t row_k = doc.k_offset + j;
              const int kpos = int(j + shift.k);
              if constexpr (HasMask<Mod>) {
                if (!mod.visible(int(b), int(h), qpos, kpos)) {
                  s[j - j0] = neg_inf;  // exp gives 0; an all-hidden tile is skipped below
                  continue;
                }
              }
              T sc = detail::pre_score(p, qrow, p.k + (row_k * Hkv + kh) * D, h, row_q, row_k);
              sc = mod.value(sc, int(b), int(h), qpos, kpos);
              s[j - j0] = sc;
              // NaN stays NaN (std::max would drop it): a NaN score makes its row NaN, never
              // a hidden pair.
              tile_max = std::isnan(sc) ? sc : std::max(tile_max, sc);
            }
            const T m_new = std::isnan(tile_max) ? tile_max : std::max(m[t], tile_max);
            if (m_new == neg_inf) continue;         // every score -inf (bias used as a mask)
            const T corr = std::exp(m[t] - m_new);  // 0 on the first visible tile
            T* a = acc.data() + t * D;
            if (corr != T(1)) {
              l[t] *= corr;
              for (int64_t d = 0; d < D; ++d) a[d] *= corr;
            }
            for (int64_t j = jl; j <= jh; ++j) {
              const T pj = std::exp(s[j - j0] - m_new);
              l[t] += pj;
              const T pv = detail::operand(p, pj);
              const T* vrow = p.v + ((doc.k_offset + j) * Hkv + kh) * D;
              for (int64_t d = 0; d < D; ++d) a[d] += pv * vrow[d];
            }
            m[t] = m_new;
          }
        }
        for (int64_t t = 0; t < rows; ++t) {
          if (!(l[t] > T(0)) && !std::isnan(l[t])) continue;  // a NaN row is written NaN
          const int64_t row_q = doc.q_offset + i0 + t;
          T* o = out + (row_q * H + h) * D;
          const T inv = T(1) / l[t];
          for (int64_t d = 0; d < D; ++d) o[d] = acc[t * D + d] * inv;
          lse[h * r.t_q + row_q] = m[t] + std::log(l[t]);
        }
      }
    }
  }
}

// Gradients, all zero-filled by the caller and accumulated here in T: dq (T_q, H, D),
// dk / dv (T_k, H_kv, D), dbias (bias layout, or null), dparams (mod.param_count(), or
// null). Loop order is fixed: documents, kv heads, key tiles, the group's query heads, rows.
template <class T, class Mod>
void flash_backward(const Problem<T>& p, const Mod& mod, const T* out, const T* dout, const T* lse,
                    T* dq, T* dk, T* dv, T* dbias, T* dparams) {
  const ResolvedAttention& r = *p.r;
  const int64_t H = r.heads, Hkv = r.kv_heads, D = r.head_dim, group = H / Hkv;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T scale = T(r.scale);
  // delta = rowsum(dO * O) per (row, head): the softmax Jacobian term of each row.
  std::vector<T> delta(size_t(r.t_q * H), T(0));
  for (const DocSpan& doc : r.docs)
    for (int64_t i = 0; i < doc.q_len; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t o = ((doc.q_offset + i) * H + h) * D;
        delta[(doc.q_offset + i) * H + h] = detail::dot(dout + o, out + o, D);
      }
  for (size_t b = 0; b < r.docs.size(); ++b) {
    const DocSpan& doc = r.docs[b];
    const PositionShift shift = detail::position_shift(r, b);
    for (int64_t kh = 0; kh < Hkv; ++kh) {
      for (int64_t j0 = 0; j0 < doc.k_len; j0 += kBlockK) {
        const int64_t j_end = std::min(doc.k_len, j0 + kBlockK) - 1;
        for (int64_t h = kh * group; h < (kh + 1) * group; ++h) {
          for (int64_t i = 0; i < doc.q_len; ++i) {
            int64_t lo, hi;
            visible_keys(i, doc.q_len, doc.k_len, r.causal, r.window_left, r.window_right, &lo,
                         &hi);
            const int64_t jl = std::max(lo, j0), jh = std::min(hi, j_end);
            if (jl > jh) continue;
            const int64_t row_q = doc.q_offset + i;
            const T L = lse[h * r.t_q + row_q];
            if (L == neg_inf) continue;  // the row saw nothing: no gradient
            const int64_t qo = (row_q * H + h) * D;
            const T* qrow = p.q + qo;
            const T* dorow = dout + qo;
            T* dqrow = dq + qo;
            const T dl = delta[row_q * H + h];
            const int qpos = int(query_position(i, doc.q_len, doc.k_len) + shift.q);
            for (int64_t j = jl; j <= jh; ++j) {
              const int kpos = int(j + shift.k);
              if constexpr (HasMask<Mod>) {
                if (!mod.visible(int(b), int(h), qpos, kpos)) continue;
              }
              const int64_t row_k = doc.k_offset + j;
              const int64_t ko = (row_k * Hkv + kh) * D;
              const T* krow = p.k + ko;
              const T* vrow = p.v + ko;
              const T s0 = detail::pre_score(p, qrow, krow, h, row_q, row_k);
              const T pj = std::exp(mod.value(s0, int(b), int(h), qpos, kpos) - L);
              const T ds = pj * (detail::dot(dorow, vrow, D) - dl);  // d loss / d value
              if constexpr (score_mod::HasParams<Mod>) {
                if (dparams) mod.param_grad(ds, s0, int(b), int(h), qpos, kpos, dparams);
              }
              const T ds0 = ds * mod.derivative(s0, int(b), int(h), qpos, kpos);
              if (dbias) dbias[p.bias.index(h, row_q, row_k)] += ds0;
              const T g = detail::operand(p, ds0) * scale, pv = detail::operand(p, pj);
              T* dkrow = dk + ko;
              T* dvrow = dv + ko;
              for (int64_t d = 0; d < D; ++d) {
                dqrow[d] += g * krow[d];
                dkrow[d] += g * qrow[d];
                dvrow[d] += pv * dorow[d];
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace driftless::layers::cpu
