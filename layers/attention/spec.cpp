// validate(): every check of the attention contracts, before any work (ARCHITECTURE.md "Errors").
#include "layers/attention/spec.h"

#include <cmath>

#include "layers/attention/expr/expr.h"

namespace driftless::layers {

namespace {

constexpr const char* kOp = "attention";

std::vector<int64_t> read_i32(const Tensor& t, const char* name, int64_t expected_len) {
  DL_CHECK(t.defined(), kOp, name << " is required");
  DL_CHECK(t.dtype() == DType::i32, kOp, name << " must be i32, got " << dtype_name(t.dtype()));
  DL_CHECK(t.dim() == 1, kOp, name << " must be 1-D, got shape " << shape_str(t.shape()));
  DL_CHECK(expected_len < 0 || t.size(0) == expected_len, kOp,
           name << " has " << t.size(0) << " entries, expected " << expected_len);
  return t.to_vector<int64_t>();
}

// Canonical prefix sums: start at 0, non-decreasing, end at `end` (or at most `end`).
void check_prefix(const std::vector<int64_t>& c, const char* name, int64_t end, bool exact_end,
                  const char* end_what) {
  DL_CHECK(!c.empty(), kOp, name << " must have at least one entry (N + 1 for N documents)");
  DL_CHECK(c[0] == 0, kOp, name << "[0] = " << c[0] << ", expected 0 (canonical layout)");
  for (size_t i = 1; i < c.size(); ++i)
    DL_CHECK(c[i] >= c[i - 1], kOp,
             name << "[" << i << "] = " << c[i] << " is smaller than " << name << "[" << i - 1
                  << "] = " << c[i - 1]);
  const int64_t last = c.back();
  const size_t li = c.size() - 1;
  if (exact_end)
    DL_CHECK(last == end, kOp,
             name << "[" << li << "] = " << last << ", expected " << end_what << " = " << end);
  else
    DL_CHECK(last <= end, kOp,
             name << "[" << li << "] = " << last << " exceeds " << end_what << " = " << end);
}

// Offsets and real lengths of one side (q or k) from the spec's tensors.
void resolve_side(const Tensor& cu, const Tensor& padded, const Tensor& seqused, int64_t rows,
                  int64_t max_seqlen, char side, std::vector<int64_t>& offsets,
                  std::vector<int64_t>& lengths) {
  const std::string cu_name = std::string("cu_seqlens_") + side;
  const std::string pad_name = cu_name + "_padded";
  const std::string used_name = std::string("seqused_") + side;
  const std::string rows_what = std::string("the rows of ") + (side == 'q' ? "q" : "k") + " (" +
                                (side == 'q' ? "T_q" : "T_k") + ")";
  std::vector<int64_t> c = read_i32(cu, cu_name.c_str(), -1);
  const int64_t n = int64_t(c.size()) - 1;
  const bool has_pad = padded.defined();
  const bool has_used = seqused.defined();
  check_prefix(c, cu_name.c_str(), rows, !has_pad, rows_what.c_str());
  offsets = c;
  lengths.assign(size_t(std::max<int64_t>(n, 0)), 0);
  for (int64_t i = 0; i < n; ++i) lengths[i] = c[i + 1] - c[i];
  if (has_pad) {
    offsets = read_i32(padded, pad_name.c_str(), n + 1);
    check_prefix(offsets, pad_name.c_str(), rows, true, rows_what.c_str());
  }
  if (has_used) {
    std::vector<int64_t> u = read_i32(seqused, used_name.c_str(), n);
    for (int64_t i = 0; i < n; ++i) {
      DL_CHECK(u[i] >= 0, kOp, used_name << "[" << i << "] = " << u[i] << " is negative");
      if (has_pad)
        DL_CHECK(u[i] == lengths[i], kOp,
                 used_name << "[" << i << "] = " << u[i] << " disagrees with " << cu_name << "["
                           << i + 1 << "] - " << cu_name << "[" << i << "] = " << lengths[i]);
      lengths[i] = u[i];
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t room = offsets[i + 1] - offsets[i];
    DL_CHECK(lengths[i] <= room, kOp,
             "document " << i << " has " << lengths[i] << " real " << side << " rows but only "
                         << room << " rows of memory (offsets " << offsets[i] << ".."
                         << offsets[i + 1] << ")");
    DL_CHECK(lengths[i] <= max_seqlen, kOp,
             "max_seqlen_" << side << " = " << max_seqlen << " is smaller than the length "
                           << lengths[i] << " of document " << i);
  }
}

}  // namespace

ScoreModSpec ScoreModSpec::make_softcap(double cap) {
  ScoreModSpec s;
  s.kind = ScoreModKind::softcap;
  s.softcap = cap;
  return s;
}

ScoreModSpec ScoreModSpec::make_alibi(Tensor slopes) {
  ScoreModSpec s;
  s.kind = ScoreModKind::alibi;
  s.alibi_slopes = std::move(slopes);
  return s;
}

ScoreModSpec ScoreModSpec::make_relative_position(Tensor table, int64_t max_distance) {
  ScoreModSpec s;
  s.kind = ScoreModKind::relative_position;
  s.relative_position_table = std::move(table);
  s.relative_position_max_distance = max_distance;
  return s;
}

ScoreModSpec ScoreModSpec::make_expression(std::shared_ptr<const expr::Program> score,
                                           std::shared_ptr<const expr::Program> mask,
                                           std::vector<Tensor> params, int64_t head_offset) {
  ScoreModSpec s;
  s.kind = ScoreModKind::expression;
  s.expression = std::move(score);
  s.mask = std::move(mask);
  s.expression_params = std::move(params);
  s.head_offset = head_offset;
  return s;
}

namespace {
const std::vector<expr::ParamDecl>* expression_decls(const ScoreModSpec& m) {
  if (m.kind != ScoreModKind::expression) return nullptr;
  const expr::Program* p = m.expression ? m.expression.get() : m.mask.get();
  return p ? &p->params : nullptr;
}
}  // namespace

std::vector<Tensor> expression_learnables(const ScoreModSpec& m) {
  std::vector<Tensor> out;
  const auto* decls = expression_decls(m);
  if (!decls || !m.expression) return out;
  for (size_t i = 0; i < decls->size() && i < m.expression_params.size(); ++i)
    if ((*decls)[i].learnable) out.push_back(m.expression_params[i]);
  return out;
}

std::vector<Tensor> split_expression_grad(const ScoreModSpec& m, const Tensor& flat) {
  std::vector<Tensor> out;
  const auto* decls = expression_decls(m);
  if (!decls || !m.expression) return out;
  int64_t at = 0;
  for (size_t i = 0; i < decls->size(); ++i) {
    if (!(*decls)[i].learnable) continue;
    const Tensor& p = m.expression_params[i];
    out.push_back(flat.defined() ? flat.narrow(0, at, p.numel()).reshape(p.shape()).to(p.dtype())
                                 : Tensor());
    at += p.numel();
  }
  return out;
}

template <class T>
BoundScoreMod<T> bind_score_mod(const ScoreModSpec& m, Device device) {
  BoundScoreMod<T> b;
  ScoreModDesc<T>& d = b.desc;
  d.kind = m.kind;
  switch (m.kind) {
    case ScoreModKind::none:
      return b;
    case ScoreModKind::softcap:
      d.softcap = T(m.softcap);
      return b;
    case ScoreModKind::alibi:
      b.alibi_slopes = m.alibi_slopes.to(device, dtype_of<T>).contiguous();
      d.alibi_slopes = b.alibi_slopes.template data<T>();
      return b;
    case ScoreModKind::relative_position:
      b.relative_position_table = m.relative_position_table.to(device, dtype_of<T>).contiguous();
      d.relative_position_table = b.relative_position_table.template data<T>();
      d.relative_position_heads = int(b.relative_position_table.size(0));
      d.relative_position_max_distance = int(m.relative_position_max_distance);
      return b;
    case ScoreModKind::expression:
      for (const Tensor& t : m.expression_params)
        b.expression_params.push_back(t.to(device, dtype_of<T>).contiguous());
      return b;
  }
  DL_FAIL(kOp, "unknown score modifier kind " << int(m.kind));
}

template BoundScoreMod<float> bind_score_mod<float>(const ScoreModSpec&, Device);
template BoundScoreMod<double> bind_score_mod<double>(const ScoreModSpec&, Device);

const char* score_mod_name(ScoreModKind kind) {
  switch (kind) {
    case ScoreModKind::none:
      return "none";
    case ScoreModKind::softcap:
      return "softcap";
    case ScoreModKind::alibi:
      return "alibi";
    case ScoreModKind::relative_position:
      return "relative_position";
    case ScoreModKind::expression:
      return "expression";
  }
  return "?";
}

bool reads_positions(const ScoreModSpec& m) {
  switch (m.kind) {
    case ScoreModKind::none:
    case ScoreModKind::softcap:
      return false;
    case ScoreModKind::alibi:
    case ScoreModKind::relative_position:
      return true;
    case ScoreModKind::expression:
      return (m.expression && m.expression->reads_positions()) ||
             (m.mask && m.mask->reads_positions());
  }
  return true;
}

AttentionSpec AttentionSpec::from_lengths(const std::vector<int64_t>& q_lens,
                                          const std::vector<int64_t>& k_lens, bool causal) {
  DL_CHECK(q_lens.size() == k_lens.size(), kOp,
           q_lens.size() << " query lengths but " << k_lens.size() << " key lengths");
  std::vector<int32_t> cq{0}, ck{0};
  AttentionSpec s;
  for (size_t i = 0; i < q_lens.size(); ++i) {
    cq.push_back(int32_t(cq.back() + q_lens[i]));
    ck.push_back(int32_t(ck.back() + k_lens[i]));
    s.max_seqlen_q = std::max(s.max_seqlen_q, q_lens[i]);
    s.max_seqlen_k = std::max(s.max_seqlen_k, k_lens[i]);
  }
  s.cu_seqlens_q = Tensor::from_vector(cq);
  s.cu_seqlens_k = Tensor::from_vector(ck);
  s.causal = causal;
  return s;
}

ResolvedAttention validate(const AttentionSpec& spec, const Tensor& q, const Tensor& k,
                           const Tensor& v) {
  DL_CHECK(q.defined() && k.defined() && v.defined(), kOp, "q, k and v must all be defined");
  DL_CHECK(q.dim() == 3, kOp, "q must be (T_q, H, D), got shape " << shape_str(q.shape()));
  DL_CHECK(k.dim() == 3, kOp, "k must be (T_k, H_kv, D), got shape " << shape_str(k.shape()));
  DL_CHECK(
      v.shape() == k.shape(), kOp,
      "v must have the shape of k " << shape_str(k.shape()) << ", got " << shape_str(v.shape()));
  DL_CHECK(is_floating(q.dtype()), kOp, "q must be floating, got " << dtype_name(q.dtype()));
  DL_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), kOp,
           "q, k, v must share a dtype, got " << dtype_name(q.dtype()) << ", "
                                              << dtype_name(k.dtype()) << ", "
                                              << dtype_name(v.dtype()));
  DL_CHECK(q.device() == k.device() && q.device() == v.device(), kOp,
           "q, k, v must be on one device");
  DL_CHECK(k.size(2) == q.size(2), kOp,
           "head dim of k (" << k.size(2) << ") must match q (" << q.size(2) << ")");
  DL_CHECK(q.size(2) > 0, kOp, "head dim must be positive, got " << q.size(2));
  DL_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, kOp,
           "H = " << q.size(1) << " query heads must be a multiple of H_kv = " << k.size(1));

  ResolvedAttention r;
  r.t_q = q.size(0);
  r.t_k = k.size(0);
  r.heads = q.size(1);
  r.kv_heads = k.size(1);
  r.head_dim = q.size(2);
  DL_CHECK(spec.cu_seqlens_q.defined(), kOp, "cu_seqlens_q is required");
  DL_CHECK(spec.cu_seqlens_k.defined(), kOp, "cu_seqlens_k is required");
  DL_CHECK(spec.cu_seqlens_q.numel() == spec.cu_seqlens_k.numel(), kOp,
           "cu_seqlens_q lists " << spec.cu_seqlens_q.numel() - 1 << " documents, cu_seqlens_k "
                                 << spec.cu_seqlens_k.numel() - 1);
  std::vector<int64_t> oq, lq, ok, lk;
  resolve_side(spec.cu_seqlens_q, spec.cu_seqlens_q_padded, spec.seqused_q, r.t_q,
               spec.max_seqlen_q, 'q', oq, lq);
  resolve_side(spec.cu_seqlens_k, spec.cu_seqlens_k_padded, spec.seqused_k, r.t_k,
               spec.max_seqlen_k, 'k', ok, lk);
  for (size_t i = 0; i < lq.size(); ++i) r.docs.push_back({oq[i], lq[i], ok[i], lk[i]});

  DL_CHECK(spec.window_left >= -1 && spec.window_right >= -1, kOp,
           "window (" << spec.window_left << ", " << spec.window_right
                      << ") must be -1 (unbounded) or >= 0");
  r.causal = spec.causal;
  r.window_left = spec.window_left;
  r.window_right = spec.window_right;
  r.first_doc_shift = spec.first_doc_shift;
  r.scale = spec.softmax_scale ? *spec.softmax_scale : 1.0 / std::sqrt(double(r.head_dim));
  DL_CHECK(std::isfinite(r.scale), kOp, "softmax_scale must be finite, got " << r.scale);

  const ScoreModSpec& m = spec.score_mod;
  switch (m.kind) {
    case ScoreModKind::none:
      break;
    case ScoreModKind::softcap:
      DL_CHECK(m.softcap > 0 && std::isfinite(m.softcap), kOp,
               "softcap must be positive and finite, got " << m.softcap);
      break;
    case ScoreModKind::alibi:
      DL_CHECK(m.alibi_slopes.defined() && is_floating(m.alibi_slopes.dtype()) &&
                   m.alibi_slopes.shape() == Shape{r.heads},
               kOp,
               "alibi slopes must be floating (H) = ("
                   << r.heads << "), got "
                   << (m.alibi_slopes.defined() ? shape_str(m.alibi_slopes.shape()) : "undefined"));
      break;
    case ScoreModKind::relative_position: {
      const int64_t md = m.relative_position_max_distance;
      DL_CHECK(md >= 0, kOp, "relative_position max_distance must be >= 0, got " << md);
      const Tensor& t = m.relative_position_table;
      DL_CHECK(t.defined() && is_floating(t.dtype()) && t.shape() == Shape({r.heads, 2 * md + 1}),
               kOp,
               "relative_position table must be floating (H, 2 * max_distance + 1) = ("
                   << r.heads << ", " << 2 * md + 1 << "), got "
                   << (t.defined() ? shape_str(t.shape()) : "undefined"));
      break;
    }
    case ScoreModKind::expression: {
      DL_CHECK(m.expression || m.mask, kOp,
               "an expression modifier needs a score or a mask expression");
      const auto& decls = *expression_decls(m);
      const expr::Program& prog = m.expression ? *m.expression : *m.mask;
      DL_CHECK(!m.expression || !m.expression->is_mask, kOp, "the score expression is a mask");
      DL_CHECK(!m.mask || m.mask->is_mask, kOp, "the mask expression is a score expression");
      DL_CHECK(!m.expression || !m.mask || m.mask->heads == m.expression->heads, kOp,
               "score and mask expressions were compiled for different head counts");
      DL_CHECK(m.head_offset >= 0 && m.head_offset + r.heads <= prog.heads, kOp,
               "expression heads [" << m.head_offset << ", " << m.head_offset + r.heads
                                    << ") exceed the " << prog.heads << " it was compiled for");
      DL_CHECK(m.expression_params.size() == decls.size(), kOp,
               "expression has " << decls.size() << " parameters, got "
                                 << m.expression_params.size() << " tensors");
      for (size_t i = 0; i < decls.size(); ++i) {
        const Tensor& t = m.expression_params[i];
        DL_CHECK(t.defined() && is_floating(t.dtype()) && t.shape() == Shape(decls[i].shape), kOp,
                 "expression parameter '" << decls[i].name << "' must be floating "
                                          << shape_str(Shape(decls[i].shape)) << ", got "
                                          << (t.defined() ? shape_str(t.shape()) : "undefined"));
      }
      break;
    }
  }
  if (spec.bias.defined()) {
    const Tensor& b = spec.bias;
    DL_CHECK(is_floating(b.dtype()) && b.dim() == 3, kOp,
             "bias must be floating (H|1, T_q|1, T_k|1), got " << dtype_name(b.dtype()) << " "
                                                               << shape_str(b.shape()));
    const int64_t want[3] = {r.heads, r.t_q, r.t_k};
    for (int d = 0; d < 3; ++d)
      DL_CHECK(b.size(d) == want[d] || b.size(d) == 1, kOp,
               "bias dim " << d << " is " << b.size(d) << ", expected " << want[d]
                           << " or 1 (bias shape " << shape_str(b.shape()) << ")");
  }
  return r;
}

}  // namespace driftless::layers
