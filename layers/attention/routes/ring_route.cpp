// The ring route (ring_route.h).
#include "layers/attention/routes/ring_route.h"

#include <algorithm>
#include <utility>

#include "engine/autograd/autograd.h"
#include "engine/ops/ops.h"
#include "layers/attention/attention.h"
#include "layers/attention/context_parallel.h"
#include "layers/attention/routes/buffer_route.h"

namespace driftless::layers {

namespace {
constexpr const char* kOp = "context_parallel";
}  // namespace

namespace {

// The attention call of one query chunk, made once every rank's K/V rows are in the buffer:
// the chunk's Lc rows against buffer rows [k_begin, k_begin + k_rows) of its sequence, from the
// start of its first document (which may lie in an earlier chunk or micro-sequence) to the
// chunk's end. Bottom-right causal per document (spec.h "Positions"), so a modifier or mask
// sees document positions, as in a single call over the document; no shift, no LSE merge.
struct RingPart {
  int64_t sequence = 0;  // j: index into the plan's sequences (its slot: RingPlan::slot[j])
  int64_t q_row = 0;     // first local row of q
  int64_t k_begin = 0, k_rows = 0;
  AttentionSpec spec;
};

struct RingPlan {
  int64_t P = 1, r = 0, Lc = 0;
  std::vector<int64_t> slot, begin;  // per sequence: buffer slot, micro-sequence start
  std::vector<RingPart> parts;       // per sequence j, chunk c: parts[2 j + c]
  bool one_micro_sequence = true;    // every sequence is one micro-sequence
};

RingPlan plan_ring(const std::vector<RingSequence>& seqs, const KvExchange& ex,
                   const AttentionSpec& base, int64_t T) {
  RingPlan plan;
  plan.P = ex.ranks();
  plan.r = ex.rank();
  const int64_t P = plan.P, r = plan.r, n = int64_t(seqs.size());
  DL_CHECK(n >= 1 && T % (2 * n) == 0, kOp,
           "ring: " << T << " local rows do not split into 2 chunks of " << n << " sequences");
  plan.Lc = T / (2 * n);
  const int64_t Lc = plan.Lc;
  const auto ids = ring_chunks(r, P);
  for (int64_t j = 0; j < n; ++j) {
    const RingSequence& s = seqs[size_t(j)];
    DL_CHECK(s.chunk[0] && s.chunk[1], kOp, "ring: sequence " << j << " lacks a chunk");
    const int64_t L = s.chunk[0]->sequence_length / s.chunk[0]->micro_sequences;
    const int64_t m0 = int64_t(s.chunk[0]->micro_sequence) * L;
    DL_CHECK(L == 2 * P * Lc, kOp,
             "ring: micro-sequence of " << L << " rows is not 2 x " << P << " chunks of " << Lc);
    plan.slot.push_back(s.slot);
    plan.begin.push_back(m0);
    plan.one_micro_sequence = plan.one_micro_sequence && s.chunk[0]->micro_sequences == 1;
    for (int64_t c = 0; c < 2; ++c) {
      const data::ModelInput& a = *s.chunk[c];
      const int64_t a0 = m0 + ids[c] * Lc;
      DL_CHECK(a.query_begin == a0 && a.num_queries() == Lc && !a.padded(), kOp,
               "ring: sequence " << j << " chunk " << ids[c] << " must be rows [" << a0 << ", "
                                 << a0 + Lc << ") without padding, got [" << a.query_begin << ", "
                                 << a.query_end << ")");
      RingPart part;
      part.sequence = j;
      part.q_row = j * 2 * Lc + c * Lc;
      part.k_begin = a.first_document_begin;
      part.k_rows = a.num_keys();
      part.spec = spec_from_input(a);  // keys from the first document's start: its K extent
      part.spec.score_mod = base.score_mod;
      part.spec.softmax_scale = base.softmax_scale;
      part.spec.deterministic = base.deterministic;
      part.spec.window_left = base.window_left;
      plan.parts.push_back(part);
    }
  }
  return plan;
}

// The learnable inputs of a modifier (the relative-position table, an expression's learnable
// parameters), in the order the backward returns their gradients; and the same detached.
std::vector<Tensor> modifier_learnables(const ScoreModSpec& m) {
  std::vector<Tensor> out = expression_learnables(m);
  if (m.kind == ScoreModKind::relative_position) out.insert(out.begin(), m.relative_position_table);
  return out;
}
void detach_learnables(ScoreModSpec& m) {
  if (m.relative_position_table.defined())
    m.relative_position_table = m.relative_position_table.detach();
  for (Tensor& t : m.expression_params) t = t.detach();
}

// (rows, H_kv, D) K or V (c = 0, 1) of buffer rows [begin, begin + rows) of a slot.
Tensor kv_rows(const Tensor& buf, int64_t slot, int64_t begin, int64_t rows, int64_t c) {
  return buf.select(0, slot).narrow(0, begin, rows).select(1, c);
}

// Writes rank src's packed chunks (per sequence: chunk src then chunk 2P-1-src) into the buffer.
void store_chunks(const Tensor& kv, const Tensor& packed, const RingPlan& plan, int64_t src) {
  const int64_t Lc = plan.Lc, P = plan.P;
  const auto ids = ring_chunks(src, P);
  for (size_t j = 0; j < plan.slot.size(); ++j) {
    for (int64_t c = 0; c < 2; ++c)
      kv.select(0, plan.slot[j])
          .narrow(0, plan.begin[j] + ids[c] * Lc, Lc)
          .copy_(packed.narrow(0, int64_t(j) * 2 * Lc + c * Lc, Lc));
  }
}

struct RingSaved {
  RingPlan plan;
  std::vector<Tensor> lse;  // per chunk (H, Lc) f32
};

}  // namespace

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const std::vector<RingSequence>& sequences, KvBuffer& buffer, KvExchange& ex,
                      const AttentionSpec& base) {
  DL_CHECK(q.dim() == 3 && k.dim() == 3 && v.shape() == k.shape() && k.size(0) == q.size(0), kOp,
           "ring: q (T, H, D), k and v (T, H_kv, D) expected, got " << shape_str(q.shape()) << ", "
                                                                    << shape_str(k.shape()) << ", "
                                                                    << shape_str(v.shape()));
  DL_CHECK(!base.bias.defined(), kOp,
           "ring attention takes no bias tensor (it is indexed by the rows of one call)");
  DL_CHECK(base.window_right < 0, kOp,
           "ring attention takes no right window (its queries see no later keys)");
  const Tensor& kv = buffer.kv();
  DL_CHECK(kv.defined() && kv.size(3) == k.size(1) && kv.size(4) == k.size(2), kOp,
           "ring: the K/V buffer must be allocated for " << k.size(1) << " heads of " << k.size(2));
  const int64_t T = q.size(0), H = q.size(1), D = q.size(2);
  auto saved = std::make_shared<RingSaved>();
  // The parts' specs hold the modifier's learnable inputs detached (the node's own inputs).
  const std::vector<Tensor> learnables = modifier_learnables(base.score_mod);
  AttentionSpec plain = base;
  detach_learnables(plain.score_mod);
  saved->plan = plan_ring(sequences, ex, plain, T);
  const RingPlan& plan = saved->plan;
  for (size_t j = 0; j < plan.slot.size(); ++j)  // before any collective is posted
    DL_CHECK(plan.slot[j] >= 0 && plan.slot[j] < kv.size(0) &&
                 plan.begin[j] + 2 * plan.P * plan.Lc <= kv.size(1),
             kOp,
             "ring: sequence " << j << " (slot " << plan.slot[j] << ", rows from " << plan.begin[j]
                               << ") does not fit the K/V buffer " << shape_str(kv.shape()));
  const int64_t P = plan.P;
  Tensor out = Tensor::empty({T, H, D}, q.dtype(), q.device());
  saved->lse.resize(plan.parts.size());
  {
    autograd::NoGradGuard no_grad;
    // Every rank's chunks in one all-gather (rank p's packed rows at [p T, (p + 1) T)), then
    // into the buffer at their sequence rows: the keys of every call below, of the later
    // micro-sequences and of the backward.
    Tensor all = Tensor::empty({P * T, 2, k.size(1), D}, kv.dtype(), kv.device());
    Tensor mine = all.narrow(0, plan.r * T, T);
    mine.select(1, 0).copy_(k);
    mine.select(1, 1).copy_(v);
    if (P > 1) ex.all_gather(all);
    for (int64_t src = 0; src < P; ++src) store_chunks(kv, all.narrow(0, src * T, T), plan, src);
    for (size_t c = 0; c < plan.parts.size(); ++c) {
      const RingPart& p = plan.parts[c];
      const int64_t slot = plan.slot[size_t(p.sequence)];
      const AttentionOutputs o = attention_forward(
          q.narrow(0, p.q_row, plan.Lc), kv_rows(kv, slot, p.k_begin, p.k_rows, 0),
          kv_rows(kv, slot, p.k_begin, p.k_rows, 1), p.spec);
      out.narrow(0, p.q_row, plan.Lc).copy_(o.out);
      saved->lse[c] = o.lse;
    }
  }
  autograd::Context ctx;
  ctx.save_for_backward({q, out.detach()});
  KvBuffer* buf = &buffer;
  KvExchange* e = &ex;
  const DType kdt = k.dtype();
  std::vector<Tensor> inputs{q, k, v};
  inputs.insert(inputs.end(), learnables.begin(), learnables.end());
  return autograd::record(
      "ring_attention", inputs, out, std::move(ctx),
      [saved, buf, e, kdt](autograd::Context& c,
                           const std::vector<Tensor>& g) -> std::vector<Tensor> {
        autograd::NoGradGuard no_grad;
        const Tensor& q = c.saved_tensors()[0];
        const Tensor& out = c.saved_tensors()[1];
        const Tensor dout = g[0].contiguous();
        const RingPlan& plan = saved->plan;
        const Tensor& kv = buf->kv();
        const int64_t P = plan.P, Lc = plan.Lc, n = int64_t(plan.slot.size());
        // The K/V gradient sums of sequence j, (S, 2, H_kv, D) f32. With one micro-sequence
        // no other backward adds to its rows, so they live in a temporary freed after the
        // reduce-scatter (the buffer's gradient is then never allocated: kv_buffer.h);
        // otherwise in the buffer's gradient, where later micro-sequences have added theirs.
        Tensor own;
        if (plan.one_micro_sequence)
          own = Tensor::zeros({n, kv.size(1), kv.size(2), kv.size(3), kv.size(4)}, DType::f32,
                              kv.device());
        const Tensor& grad = plan.one_micro_sequence ? own : buf->grad_to_accumulate();
        auto grad_of = [&](int64_t j) {
          return grad.select(0, plan.one_micro_sequence ? j : plan.slot[size_t(j)]);
        };
        Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());
        Tensor dmod;  // the modifier's learnable inputs, summed over the calls
        for (size_t i = 0; i < plan.parts.size(); ++i) {
          const RingPart& p = plan.parts[i];
          const int64_t slot = plan.slot[size_t(p.sequence)];
          const AttentionGrads gr = attention_backward(
              q.narrow(0, p.q_row, Lc), kv_rows(kv, slot, p.k_begin, p.k_rows, 0),
              kv_rows(kv, slot, p.k_begin, p.k_rows, 1), p.spec, out.narrow(0, p.q_row, Lc),
              saved->lse[i], dout.narrow(0, p.q_row, Lc));
          dq.narrow(0, p.q_row, Lc).copy_(gr.dq);  // the chunk's one call: all its keys
          Tensor rows = grad_of(p.sequence).narrow(0, p.k_begin, p.k_rows);
          rows.select(1, 0).add_(gr.dk.to(DType::f32));
          rows.select(1, 1).add_(gr.dv.to(DType::f32));
          if (gr.dscore_mod.defined()) {
            if (dmod.defined())
              dmod.add_(gr.dscore_mod);
            else
              dmod = gr.dscore_mod.clone();
          }
        }
        // Every later micro-sequence has added its part: the micro-sequence's K/V gradient
        // rows are complete on each rank; rank p receives the sum of its chunks p, 2P-1-p.
        Tensor packed = Tensor::empty({P, n * 2 * Lc, kv.size(2), kv.size(3), kv.size(4)},
                                      DType::f32, kv.device());
        for (int64_t r = 0; r < P; ++r)
          for (int64_t j = 0; j < n; ++j) {
            const auto ids = ring_chunks(r, P);
            for (int64_t c2 = 0; c2 < 2; ++c2)
              packed.select(0, r)
                  .narrow(0, j * 2 * Lc + c2 * Lc, Lc)
                  .copy_(grad_of(j).narrow(0, plan.begin[size_t(j)] + ids[c2] * Lc, Lc));
          }
        e->reduce_scatter_packed(packed);
        const Tensor mine = packed.select(0, plan.r);  // (T, 2, H_kv, D)
        std::vector<Tensor> grads{dq, mine.select(1, 0).to(kdt).contiguous(),
                                  mine.select(1, 1).to(kdt).contiguous()};
        const ScoreModSpec& mod = plan.parts.front().spec.score_mod;
        if (mod.kind == ScoreModKind::relative_position) grads.push_back(dmod);
        for (Tensor& t : split_expression_grad(mod, dmod)) grads.push_back(t);
        return grads;
      });
}

Tensor RingRoute::attend(const RouteCall& call, const Tensor& qkv) {
  KvExchange& ex = exchange_or_single(exchange_);
  const AttentionShape& a = call.shape;
  const std::vector<PartInput>& slice = *call.slice;
  DL_CHECK(slice.size() % 2 == 0, "ring route", "the slice must list two chunks per sequence");
  std::vector<RingSequence> seqs;
  for (size_t j = 0; j < slice.size(); j += 2) {
    DL_CHECK(slice[j].slot == slice[j + 1].slot, "ring route",
             "the two chunks of a sequence must share a K/V slot");
    seqs.push_back({{slice[j].input.get(), slice[j + 1].input.get()}, slice[j].slot});
  }
  const QkvParts p = split_qkv(qkv, a.heads, a.kv_heads, a.head_dim);
  AttentionSpec base;
  base.score_mod = call.score_mod(0, a.heads);
  base.deterministic = call.deterministic;
  base.window_left = call.window_left;
  Tensor y = ring_attention(p.q, p.k, p.v, seqs, buffer(call.layer), ex, base);
  return ops::reshape(y, {qkv.size(0), a.heads * a.head_dim});
}

}  // namespace driftless::layers
