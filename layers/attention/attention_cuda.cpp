// Host glue of the CUDA attention (attention.h detail::cuda_forward / cuda_backward): turns
// a validated call into the POD problem of flash_cuda.h (documents and per-row document
// maps copied to the device, the score modifier bound to its description, score_mod.h) and
// launches the kernels. Built-in modifiers none, softcap and ALiBi; score and mask
// expressions on the fast kernels compiled at run time (jit/), with the gradient of learnable
// tables; the relative-position table and the additive bias are CPU-only for now.
// bf16 with head_dim 64 or 128 goes to the tensor-core kernels of cuda/fast/ (which need
// only the documents and a tile schedule); everything else to the reference kernels.
#include <algorithm>
#include <limits>
#include <string>

#include "engine/core/env.h"
#include "layers/attention/attention.h"
#include "layers/attention/cuda/fast/fast_attention.h"
#include "layers/attention/cuda/fast/mask_narrow.h"
#include "layers/attention/cuda/fast/sm90/bwd_sm90.h"
#include "layers/attention/cuda/flash_cuda.h"
#include "layers/attention/jit/attention_program.h"
#include "layers/attention/jit/jit_launch.h"
#include "layers/attention/mask.h"

namespace driftless::layers::detail {

namespace {

// Device copies the kernels read; they live as long as the call.
struct DeviceProblem {
  gpu::Problem p;
  BoundScoreMod<float> mod;  // mod.desc is the gpu::Mod the kernels take
  Tensor q, k, v, docs, q_doc, k_doc;
  bool fast = false;                // the call goes to the cuda/fast/ kernels
  std::vector<gpu::Doc> host_docs;  // for the fast kernels' tile schedule
  bool q_padded = false, k_padded = false;
  bool expression = false;  // a score expression: the run-time compiled fast kernels
  jit::BoundExpr expr;      // its programs and tables (in mod.expression_params)
  std::shared_ptr<const expr::Program> identity;  // the score of a mask given alone
  Tensor sums;  // the backward's fixed-point sums of learnable tables
};

// A tile schedule (fast_attention.h) on the device, as kTileInts int32s a tile.
Tensor device_tiles(const std::vector<gpu::fast::Tile>& tiles) {
  if (tiles.empty()) return Tensor();
  std::vector<int32_t> flat;
  flat.reserve(tiles.size() * gpu::fast::kTileInts);
  for (const auto& t : tiles)
    flat.insert(flat.end(), {t.doc, t.start, t.head, t.lo, t.hi, t.vis_lo, t.vis_hi});
  return Tensor::from_vector(flat).to(Device::cuda);
}

int tile_count(const Tensor& t) {
  return t.defined() ? int(t.numel() / gpu::fast::kTileInts) : 0;
}

const gpu::fast::Tile* tiles_ptr(const Tensor& t) {
  return t.defined() ? static_cast<const gpu::fast::Tile*>(t.raw_data()) : nullptr;
}

// A schedule as a mask expression leaves it (cuda/fast/mask_narrow.h): the tiles it hides
// whole dropped (forward query tiles and dK/dV key tiles: query = true for the former; their
// rows are then written as padded rows are, out 0, lse -inf; dk, dv 0: what the kernels write
// for rows that see nothing, so the caller sets the padded flag where `dropped`), and every
// kept tile's range of the other dimension (keys of a query tile, queries of a key tile)
// trimmed to the blocks between the first and the last one the mask does not hide whole,
// which the kernels' loops then skip, and its visible range set (the blocks the mask shows
// whole, where the kernels skip evaluating it). The dQ kernel's query tiles (may_drop =
// false) are narrowed but never dropped: the wgmma one writes delta, which dK/dV reads for
// every row, and it writes it whatever its key range. DRIFTLESS_MASK_TILE_SKIP=0 keeps every
// tile whole with an empty visible range, the mask evaluated on every pair (a test compares
// the bits).
std::vector<gpu::fast::Tile> narrow_tiles_by_mask(const DeviceProblem& d,
                                                  std::vector<gpu::fast::Tile> tiles, int block,
                                                  bool query, bool may_drop, bool* dropped) {
  if (d.expr.mask == nullptr || env_value("DRIFTLESS_MASK_TILE_SKIP") == "0") return tiles;
  const gpu::fast::MaskScope scope{d.expr.mask, d.expr.head_offset, d.p.heads, d.expr.shift_q,
                                   d.expr.shift_k};
  return gpu::fast::narrow_tiles_by_mask(d.p, d.host_docs, std::move(tiles), block, query, may_drop,
                                         scope, dropped);
}

void check_cuda(const Tensor& t, const char* what) {
  DL_CHECK(!t.defined() || t.device() == Device::cuda, kOp,
           what << " must be on cuda like q, got " << device_name(t.device()));
}

DeviceProblem make_device_problem(const ResolvedAttention& r, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const AttentionSpec& spec) {
  check_cuda(k, "k");
  check_cuda(v, "v");
  DL_CHECK(q.dtype() == DType::f32 || q.dtype() == DType::bf16, kOp,
           "the cuda path takes f32 or bf16 q/k/v, got " << dtype_name(q.dtype()));
  DL_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), kOp,
           "q, k, v must share a dtype on cuda, got " << dtype_name(q.dtype()) << ", "
                                                      << dtype_name(k.dtype()) << ", "
                                                      << dtype_name(v.dtype()));
  DL_CHECK(!spec.bias.defined(), kOp, "an additive bias tensor is not on cuda yet (use cpu)");
  DL_CHECK(spec.score_mod.kind != ScoreModKind::relative_position, kOp,
           "the relative-position score modifier is not on cuda yet (use cpu)");
  DeviceProblem d;
  d.fast = q.dtype() == DType::bf16 && (r.head_dim == 64 || r.head_dim == 128);
  // The fast kernels read q/k/v rows ld elements apart in place (a (T, H, D) view of the
  // fused QKV product, or of the K/V buffer) when heads are packed within a row and the row
  // stride is a whole number of heads (rows stay 16-byte aligned for cp.async); anything
  // else, and the reference kernels, get a packed copy (below, once the fast path is decided).
  auto in_place = [&](const Tensor& t) {
    const Shape& st = t.strides();
    return d.fast && t.dim() == 3 && st[2] == 1 && st[1] == r.head_dim && st[0] % r.head_dim == 0 &&
           st[0] / r.head_dim <= INT16_MAX && st[0] >= t.size(1) * r.head_dim &&
           reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0;
  };
  d.q = in_place(q) ? q : q.contiguous();
  d.k = in_place(k) ? k : k.contiguous();
  d.v = in_place(v) ? v : v.contiguous();
  std::vector<int64_t> docs;
  // The per-row document maps only the reference kernels read.
  std::vector<int32_t> q_doc(d.fast ? 0 : size_t(r.t_q), -1), k_doc(d.fast ? 0 : size_t(r.t_k), -1);
  int64_t q_rows = 0, k_rows = 0;
  for (size_t b = 0; b < r.docs.size(); ++b) {
    const DocSpan& s = r.docs[b];
    docs.insert(docs.end(), {s.q_offset, s.q_len, s.k_offset, s.k_len});
    d.host_docs.push_back({s.q_offset, s.q_len, s.k_offset, s.k_len});
    q_rows += s.q_len;
    k_rows += s.k_len;
    if (d.fast) continue;
    for (int64_t i = 0; i < s.q_len; ++i) {
      int32_t& m = q_doc[size_t(s.q_offset + i)];
      DL_CHECK(m < 0, kOp,
               "q row " << s.q_offset + i << " belongs to documents " << m << " and " << b);
      m = int32_t(b);
    }
    for (int64_t j = 0; j < s.k_len; ++j) {
      int32_t& m = k_doc[size_t(s.k_offset + j)];
      DL_CHECK(m < 0, kOp,
               "k row " << s.k_offset + j << " belongs to documents " << m << " and " << b);
      m = int32_t(b);
    }
  }
  d.q_padded = q_rows < r.t_q;
  d.k_padded = k_rows < r.t_k;
  if (!docs.empty()) d.docs = Tensor::from_vector(docs).to(Device::cuda);
  if (!q_doc.empty()) d.q_doc = Tensor::from_vector(q_doc).to(Device::cuda);
  if (!k_doc.empty()) d.k_doc = Tensor::from_vector(k_doc).to(Device::cuda);
  gpu::Problem& p = d.p;
  p.q = d.q.raw_data();
  p.k = d.k.raw_data();
  p.v = d.v.raw_data();
  p.bf16 = q.dtype() == DType::bf16;
  p.docs = d.docs.defined() ? static_cast<const gpu::Doc*>(d.docs.raw_data()) : nullptr;
  p.q_doc = d.q_doc.defined() ? d.q_doc.data<int32_t>() : nullptr;
  p.k_doc = d.k_doc.defined() ? d.k_doc.data<int32_t>() : nullptr;
  p.t_q = r.t_q;
  p.t_k = r.t_k;
  p.heads = r.heads;
  p.kv_heads = r.kv_heads;
  p.head_dim = r.head_dim;
  p.scale = float(r.scale);
  p.causal = r.causal;
  p.window_left = r.window_left;
  p.window_right = r.window_right;
  d.mod = bind_score_mod<float>(spec.score_mod, Device::cuda);
  if (spec.score_mod.kind == ScoreModKind::expression && !spec.score_mod.expression &&
      !spec.score_mod.mask)
    d.mod.desc.kind = ScoreModKind::none;  // neither a score nor a mask expression
  d.expression = d.mod.desc.kind == ScoreModKind::expression;
  if (d.expression) {
    DL_CHECK(d.fast, kOp,
             "score_mod / mask_mod expressions on cuda take bf16 q/k/v with head_dim 64 or 128 "
             "(the fast kernels), got "
                 << dtype_name(q.dtype()) << " with head_dim " << r.head_dim
                 << "; use cpu tensors otherwise");
    d.expr.mask = spec.score_mod.mask.get();
    if (!spec.score_mod.expression) d.identity = jit::identity_score(*d.expr.mask);
    d.expr.score = spec.score_mod.expression ? spec.score_mod.expression.get() : d.identity.get();
    for (const Tensor& t : d.mod.expression_params) d.expr.params.push_back(t.data<float>());
    d.expr.head_offset = int(spec.score_mod.head_offset);
    d.expr.shift_q = spec.first_doc_shift.q;  // a ring call's document positions (ModExpr)
    d.expr.shift_k = spec.first_doc_shift.k;
    // Learnable tables: the dK/dV kernel keeps the entries of its GQA group's heads in shared
    // memory (jit_launch.cpp); refused here, before any work, where they do not fit.
    const int64_t slots = expr::grad_slots(*d.expr.score, r.heads / r.kv_heads);
    DL_CHECK(d.expr.score->param_count == 0 || slots <= expr::kMaxGradSlots, kOp,
             "learnable score_mod tables on cuda: a dK/dV block keeps the entries its "
                 << r.heads / r.kv_heads << " query heads read, at most " << expr::kMaxGradSlots
                 << ", and this expression has " << slots
                 << " (a table not subscripted by h first counts whole); use cpu tensors");
  }
  d.fast = d.fast && (d.expression || gpu::fast::supported(d.p, d.mod.desc));
  if (d.fast)
    for (const DocSpan& s : r.docs)
      DL_CHECK(s.q_len < gpu::fast::kMaxDocLen && s.k_len < gpu::fast::kMaxDocLen, kOp,
               "a document of " << std::max(s.q_len, s.k_len) << " rows: the CUDA kernels take "
                                << "documents of fewer than " << gpu::fast::kMaxDocLen << " rows");
  if (d.fast) {
    p.q_row_heads = int16_t(d.q.strides()[0] / r.head_dim);
    p.k_row_heads = int16_t(d.k.strides()[0] / r.head_dim);
    p.v_row_heads = int16_t(d.v.strides()[0] / r.head_dim);
  } else {
    d.q = d.q.contiguous(), d.k = d.k.contiguous(), d.v = d.v.contiguous();
    p.q = d.q.raw_data(), p.k = d.k.raw_data(), p.v = d.v.raw_data();
  }
  return d;
}

// The fast backward's f32 sums and dK/dV schedule: dq_acc for the atomic dQ (the
// non-deterministic backward) or the ordered dQ (the deterministic backward on the sm_90a
// kernel, with its zeroed counters dq_counters), and the key tiles of block_k keys the dK/dV
// pass walks.
struct DkvPlan {
  Tensor dq_acc, dq_counters;
  std::vector<gpu::fast::Tile> k_tiles;
  int block_k = 0;
};

DkvPlan plan_dkv(const DeviceProblem& d, const ResolvedAttention& r, bool deterministic) {
  namespace fast = gpu::fast;
  DkvPlan plan;
  const bool ordered =
      deterministic && fast::sm90::dkv_ordered_runs(d.p, d.mod.desc.kind, d.host_docs);
  if ((!deterministic && fast::atomic_dq()) || ordered)
    plan.dq_acc = Tensor::empty({r.t_q * r.heads * r.head_dim}, DType::f32, Device::cuda);
  if (ordered)
    plan.dq_counters =
        Tensor::zeros({fast::sm90::ordered_dq_counters(d.p, int64_t(d.host_docs.size()))},
                      DType::i32, Device::cuda);
  const bool summed = plan.dq_acc.defined();
  plan.block_k = fast::dkv_block_k(d.p, summed, d.mod.desc.kind);
  if (ordered)
    plan.k_tiles = fast::k_tiles_by_head_descending(d.p, d.host_docs, plan.block_k,
                                                    fast::sm90::ordered_dq_group_tiles());
  else if (summed)
    plan.k_tiles = fast::k_tiles_by_head(d.p, d.host_docs, plan.block_k,
                                         fast::atomic_dkv_concurrent_ctas(d.p, d.mod.desc.kind));
  else if (fast::sm90::dkv_det_runs(d.p, d.mod.desc.kind))  // every run heaviest first
    plan.k_tiles = fast::k_tiles_by_head(d.p, d.host_docs, plan.block_k,
                                         std::numeric_limits<int64_t>::max());
  else
    plan.k_tiles = fast::k_tiles(d.p, d.host_docs, plan.block_k);
  return plan;
}

// q, k and v as the column blocks of one (T, (H + 2 H_kv) D) tensor, in that order: the
// fused QKV product the model splits.
bool qkv_layout(const Tensor& q, const Tensor& k, const Tensor& v, const ResolvedAttention& r) {
  const int64_t D = r.head_dim, rs = (r.heads + 2 * r.kv_heads) * D;
  const Shape st{rs, D, 1};
  return q.shares_storage(k) && q.shares_storage(v) && r.t_q == r.t_k && q.strides() == st &&
         k.strides() == st && v.strides() == st && k.offset() == q.offset() + r.heads * D &&
         v.offset() == k.offset() + r.kv_heads * D;
}

}  // namespace

AttentionOutputs cuda_forward(const ResolvedAttention& r, const Tensor& q, const Tensor& k,
                              const Tensor& v, const AttentionSpec& spec) {
  DeviceProblem d = make_device_problem(r, q, k, v, spec);
  Tensor out = Tensor::empty({r.t_q, r.heads, r.head_dim}, q.dtype(), Device::cuda);
  Tensor lse = Tensor::empty({r.heads, r.t_q}, DType::f32, Device::cuda);
  if (d.fast) {
    bool dropped = false;
    const Tensor tiles = device_tiles(
        narrow_tiles_by_mask(d, gpu::fast::q_tiles(d.p, d.host_docs, gpu::fast::kFwdBlockQ),
                             gpu::fast::kFwdBlockQ, true, true, &dropped));
    if (d.expression)
      jit::forward(d.p, d.expr, tiles_ptr(tiles), tile_count(tiles), d.q_padded || dropped,
                   out.raw_data(), lse.data<float>());
    else
      gpu::fast::forward(d.p, d.mod.desc, tiles_ptr(tiles), tile_count(tiles), d.q_padded,
                         out.raw_data(), lse.data<float>());
    return {out, lse};
  }
  gpu::launch_forward(d.p, d.mod.desc, out.raw_data(), lse.data<float>());
  return {out, lse};
}

AttentionGrads cuda_backward(const ResolvedAttention& r, const Tensor& q, const Tensor& k,
                             const Tensor& v, const AttentionSpec& spec, const Tensor& out,
                             const Tensor& lse, const Tensor& dout) {
  check_cuda(out, "out");
  check_cuda(lse, "lse");
  check_cuda(dout, "d_out");
  DeviceProblem d = make_device_problem(r, q, k, v, spec);
  // The fast delta kernel reads out and dout in 16-byte units: a view that starts off a
  // 16-byte boundary is copied (fresh allocations are aligned).
  auto aligned16 = [](const Tensor& t) {  // t contiguous
    return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0 ? t : t.clone();
  };
  Tensor oc = aligned16(out.to(q.dtype()).contiguous());
  Tensor doc = aligned16(dout.to(q.dtype()).contiguous());
  Tensor lc = lse.to(DType::f32).contiguous();
  Tensor delta = Tensor::empty({r.t_q * r.heads}, DType::f32, Device::cuda);
  AttentionGrads g;
  if (d.fast && qkv_layout(q, k, v, r)) {
    // The gradients laid out like q, k and v: blocks of one buffer, which the split that made
    // them from the QKV product takes as its input's gradient with no copy (ops::split).
    const int64_t H = r.heads, Hkv = r.kv_heads, D = r.head_dim;
    Tensor all = Tensor::empty({r.t_q, (H + 2 * Hkv) * D}, q.dtype(), Device::cuda);
    g.dq = all.narrow(1, 0, H * D).reshape({r.t_q, H, D});
    g.dk = all.narrow(1, H * D, Hkv * D).reshape({r.t_k, Hkv, D});
    g.dv = all.narrow(1, (H + Hkv) * D, Hkv * D).reshape({r.t_k, Hkv, D});
  } else {
    g.dq = Tensor::empty({r.t_q, r.heads, r.head_dim}, q.dtype(), Device::cuda);
    g.dk = Tensor::empty({r.t_k, r.kv_heads, r.head_dim}, q.dtype(), Device::cuda);
    g.dv = Tensor::empty({r.t_k, r.kv_heads, r.head_dim}, q.dtype(), Device::cuda);
  }
  if (d.fast) {
    // The kernels write the gradients' rows as laid out above, heads packed within a row.
    const gpu::fast::OutRows rows{int(g.dq.strides()[0] / r.head_dim),
                                  int(g.dk.strides()[0] / r.head_dim)};
    const DkvPlan plan = plan_dkv(d, r, spec.deterministic);
    const Tensor& dq_acc = plan.dq_acc;
    bool k_dropped = false;
    const Tensor kt =
        device_tiles(narrow_tiles_by_mask(d, plan.k_tiles, plan.block_k, false, true, &k_dropped));
    const int dq_rows = gpu::fast::dq_block_q(d.p.head_dim);
    bool q_dropped = false;  // never set: the dQ tiles are not dropped (may_drop = false)
    // The dQ kernel's tiles, which the atomic backward does not run.
    const Tensor qt =
        dq_acc.defined()
            ? Tensor()
            : device_tiles(narrow_tiles_by_mask(d, gpu::fast::q_tiles(d.p, d.host_docs, dq_rows),
                                                dq_rows, true, false, &q_dropped));
    float* acc = dq_acc.defined() ? dq_acc.data<float>() : nullptr;
    if (d.expression && d.expr.score->param_count > 0) {
      // The learnables' gradient (flat, as the CPU's ExprMod::param_grad fills it) from
      // fixed-point sums (cuda/fast/param_grad.cuh): hi, lo and the overflow word.
      const int64_t n = d.expr.score->param_count;
      Tensor sums = Tensor::zeros({2 * n + 1}, DType::i64, Device::cuda);
      g.dscore_mod = Tensor::empty({n}, DType::f32, Device::cuda);
      d.expr.grad_acc = static_cast<unsigned long long*>(sums.raw_data());
      d.expr.dparams = g.dscore_mod.data<float>();
      d.sums = sums;
    }
    if (d.expression)
      jit::backward(d.p, d.expr, tiles_ptr(qt), tile_count(qt), tiles_ptr(kt), tile_count(kt),
                    d.q_padded, d.k_padded || k_dropped, oc.raw_data(), doc.raw_data(),
                    lc.data<float>(), delta.data<float>(), g.dq.raw_data(), g.dk.raw_data(),
                    g.dv.raw_data(), rows, acc);
    else
      gpu::fast::backward(d.p, d.mod.desc, tiles_ptr(qt), tile_count(qt), tiles_ptr(kt),
                          tile_count(kt), d.q_padded, d.k_padded, oc.raw_data(), doc.raw_data(),
                          lc.data<float>(), delta.data<float>(), g.dq.raw_data(), g.dk.raw_data(),
                          g.dv.raw_data(), rows, acc,
                          plan.dq_counters.defined() ? plan.dq_counters.data<int32_t>() : nullptr);
    return g;
  }
  gpu::launch_backward(d.p, d.mod.desc, oc.raw_data(), doc.raw_data(), lc.data<float>(),
                       delta.data<float>(), g.dq.raw_data(), g.dk.raw_data(), g.dv.raw_data());
  return g;
}

}  // namespace driftless::layers::detail
