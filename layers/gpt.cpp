// GPT-2 forward as a handful of autograd nodes per block (ARCHITECTURE.md "Granularity").
#include "layers/gpt.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "engine/autograd/autograd.h"
#include "engine/core/random.h"
#include "engine/ops/ops.h"
#include "layers/attention/attention.h"
#include "layers/linear.h"
#include "layers/lm_loss.h"

namespace driftless::layers {

namespace {

std::string layer_name(int64_t l, const std::string& part) {
  return "h." + std::to_string(l) + "." + part;
}

// The slice's rows named by their place in the step's global batch (sequence x S +
// position), so dropout draws the mask `simple` draws whatever the layout.
std::vector<ops::DropoutRows> dropout_rows(const std::vector<SliceInput>& slice) {
  std::vector<ops::DropoutRows> rows;
  for (const auto& s : slice)
    rows.push_back({s.global_sequence * s.input->sequence_length + s.input->sequence_k_past,
                    s.input->num_queries()});
  return rows;
}

// The attention call of one sequence from its ModelInput (padding in FA3 convention:
// memory offsets in cu_seqlens_*, real lengths in seqused_*).
AttentionSpec spec_from_input(const data::ModelInput& in, bool fault_cu_k) {
  AttentionSpec s;
  s.causal = true;
  if (in.padded()) {
    s.cu_seqlens_q = Tensor::from_vector(in.cu_seqlens_q_padded);
    s.cu_seqlens_k = Tensor::from_vector(in.cu_seqlens_k_padded);
    s.seqused_q = Tensor::from_vector(in.seqused_q);
    s.seqused_k = Tensor::from_vector(in.seqused_k);
  } else {
    s.cu_seqlens_q = Tensor::from_vector(in.cu_seqlens_q);
    std::vector<int32_t> cu_k = in.cu_seqlens_k;
    if (fault_cu_k && in.first_document_begin > 0 && !cu_k.empty()) {
      // The classic bug: cu_seqlens_k in absolute positions, shifted by the past.
      const int32_t shift = int32_t(in.first_document_begin);
      for (auto& c : cu_k) c = std::min<int32_t>(c + shift, cu_k.back());
      cu_k[0] = 0;
    }
    s.cu_seqlens_k = Tensor::from_vector(cu_k);
  }
  s.max_seqlen_q = std::max<int64_t>(in.max_seqlen_q, 1);
  s.max_seqlen_k = std::max<int64_t>(in.max_seqlen_k, 1);
  if (fault_cu_k && !in.padded()) {  // keep the faulty layout self-consistent
    const auto cu = s.cu_seqlens_k.to_vector<int32_t>();
    for (size_t n = 0; n + 1 < cu.size(); ++n)
      s.max_seqlen_k = std::max<int64_t>(s.max_seqlen_k, cu[n + 1] - cu[n]);
  }
  return s;
}

// The attention call of several sequences side by side: each part's documents, with its
// q rows after the previous parts' and its K extent (k_parts[i] rows) after theirs.
AttentionSpec merge_specs(const std::vector<AttentionSpec>& parts,
                          const std::vector<int64_t>& k_rows) {
  if (parts.size() == 1) return parts[0];
  const bool padded = parts[0].seqused_q.defined();
  std::vector<int32_t> cu_q{0}, cu_k{0}, used_q, used_k;
  int32_t q_off = 0, k_off = 0;
  AttentionSpec m;
  m.causal = parts[0].causal;
  for (size_t i = 0; i < parts.size(); ++i) {
    const AttentionSpec& p = parts[i];
    DL_CHECK(p.seqused_q.defined() == padded && p.causal == m.causal, "gpt",
             "sequences of one slice differ in padding or masking");
    const auto cq = p.cu_seqlens_q.to_vector<int32_t>(), ck = p.cu_seqlens_k.to_vector<int32_t>();
    for (size_t d = 1; d < cq.size(); ++d) cu_q.push_back(q_off + cq[d]);
    for (size_t d = 1; d < ck.size(); ++d) cu_k.push_back(k_off + ck[d]);
    if (padded) {
      for (int32_t u : p.seqused_q.to_vector<int32_t>()) used_q.push_back(u);
      for (int32_t u : p.seqused_k.to_vector<int32_t>()) used_k.push_back(u);
    }
    q_off += cq.back();
    k_off += int32_t(k_rows[i]);
    DL_CHECK(ck.back() == k_rows[i], "gpt",
             "cu_seqlens_k of sequence " << i << " ends at " << ck.back() << ", its K extent has "
                                         << k_rows[i] << " rows");
    m.max_seqlen_q = std::max(m.max_seqlen_q, p.max_seqlen_q);
    m.max_seqlen_k = std::max(m.max_seqlen_k, p.max_seqlen_k);
  }
  m.cu_seqlens_q = Tensor::from_vector(cu_q);
  m.cu_seqlens_k = Tensor::from_vector(cu_k);
  if (padded) {
    m.seqused_q = Tensor::from_vector(used_q);
    m.seqused_k = Tensor::from_vector(used_k);
  }
  return m;
}


// Whether the slice is whole sequences of s rows (no past, no micro-sequence split) in
// adjacent buffer slots.
bool whole_sequences(const std::vector<SliceInput>& slice, int64_t s) {
  for (size_t i = 0; i < slice.size(); ++i) {
    const data::ModelInput& in = *slice[i].input;
    if (in.first_document_begin != 0 || in.sequence_k_past != 0 || in.sequence_k_end != s ||
        in.num_queries() != s || slice[i].slot != slice[0].slot + int64_t(i))
      return false;
  }
  return true;
}

}  // namespace

Gpt::Gpt(const GptConfig& c, Device device, DType compute) : config_(c), device_(device) {
  DL_CHECK(c.n_embd % c.n_head == 0 && c.n_head % c.kv_heads() == 0, "gpt",
           "n_embd " << c.n_embd << ", n_head " << c.n_head << ", n_kv_head " << c.kv_heads()
                     << " do not divide");
  DL_CHECK(!(c.alibi && c.softcap > 0), "gpt",
           "alibi and softcap together are not supported (one score modifier per layer)");
  const int64_t C = c.n_embd, D = c.head_dim(), qkv = (c.n_head + 2 * c.kv_heads()) * D;
  slab_.declare("wte.weight", {c.vocab_size, C}, true);
  slab_.declare("wpe.weight", {c.n_positions, C}, true);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    slab_.declare(layer_name(l, "ln_1.weight"), {C}, false);
    slab_.declare(layer_name(l, "ln_1.bias"), {C}, false);
    slab_.declare(layer_name(l, "attn.c_attn.weight"), {qkv, C}, true);
    slab_.declare(layer_name(l, "attn.c_attn.bias"), {qkv}, false);
    slab_.declare(layer_name(l, "attn.c_proj.weight"), {C, C}, true);
    slab_.declare(layer_name(l, "attn.c_proj.bias"), {C}, false);
    slab_.declare(layer_name(l, "ln_2.weight"), {C}, false);
    slab_.declare(layer_name(l, "ln_2.bias"), {C}, false);
    slab_.declare(layer_name(l, "mlp.c_fc.weight"), {4 * C, C}, true);
    slab_.declare(layer_name(l, "mlp.c_fc.bias"), {4 * C}, false);
    slab_.declare(layer_name(l, "mlp.c_proj.weight"), {C, 4 * C}, true);
    slab_.declare(layer_name(l, "mlp.c_proj.bias"), {C}, false);
  }
  slab_.declare("ln_f.weight", {C}, false);
  slab_.declare("ln_f.bias", {C}, false);
  slab_.allocate(device, compute);
  kv_buffers_.resize(size_t(c.n_layer));
  if (c.alibi) {
    std::vector<float> slopes(size_t(c.n_head));
    for (int64_t h = 0; h < c.n_head; ++h)
      slopes[size_t(h)] = float(std::pow(2.0, -8.0 * double(h + 1) / double(c.n_head)));
    alibi_slopes_ = Tensor::from_vector(slopes);
  }
}

void Gpt::init(uint64_t seed) {
  autograd::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * double(config_.n_layer));
  uint64_t index = 0;
  for (const auto& prm : slab_.parameters()) {
    const std::string& n = prm.name;
    auto ends_with = [&](const std::string& s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    if (ends_with("ln_1.weight") || ends_with("ln_2.weight") || n == "ln_f.weight") {
      prm.value.fill_(1.0);
    } else if (ends_with(".bias")) {
      prm.value.fill_(0.0);
    } else {
      double std = ends_with("c_proj.weight") ? residual_std : 0.02;
      prm.value.copy_(
          Tensor::randn(prm.value.shape(), random::derive(seed, index), DType::f32, 0.0, std));
    }
    ++index;
  }
  slab_.sync_compute();
}

void Gpt::prepare_buffers(int64_t slots, int64_t sequence_length, int64_t head_groups) {
  DL_CHECK(head_groups >= 1 && config_.kv_heads() % head_groups == 0, "gpt",
           "n_kv_head " << config_.kv_heads() << " does not divide into " << head_groups
                        << " head groups");
  for (auto& b : kv_buffers_)
    b.ensure(slots, sequence_length, config_.kv_heads() / head_groups, config_.head_dim(),
             compute_dtype(), device_, DType::f32);
}

ScoreModSpec Gpt::score_mod(int64_t h0, int64_t n) const {
  if (config_.softcap > 0) return ScoreModSpec::make_softcap(config_.softcap);
  if (config_.alibi) return ScoreModSpec::make_alibi(alibi_slopes_.narrow(0, h0, n).contiguous());
  return ScoreModSpec::none();
}

void Gpt::zero_kv_grads() {
  for (auto& b : kv_buffers_) b.zero_grad();
}

int64_t Gpt::kv_buffer_bytes() const {
  int64_t n = 0;
  for (const auto& b : kv_buffers_) n += b.bytes();
  return n;
}

Tensor Gpt::hidden(const std::vector<SliceInput>& slice, const ForwardOptions& o,
                   std::vector<RowBlock>& rows) {
  DL_CHECK(!slice.empty(), "gpt", "empty micro-batch slice");
  std::vector<int32_t> tokens, positions;
  rows.clear();
  for (const auto& s : slice) {
    const data::ModelInput& in = *s.input;
    for (int32_t t : in.tokens)
      DL_CHECK(t >= 0 && t < config_.vocab_size, "gpt",
               "token " << t << " outside the vocabulary of " << config_.vocab_size);
    for (int32_t pos : in.position_index)
      DL_CHECK(pos < config_.n_positions, "gpt",
               "position " << pos << " exceeds model.n_positions (" << config_.n_positions
                           << "); use shorter documents or a larger n_positions");
    tokens.insert(tokens.end(), in.tokens.begin(), in.tokens.end());
    positions.insert(positions.end(), in.position_index.begin(), in.position_index.end());
    rows.push_back({s.global_sequence, in.sequence_k_past, in.num_queries()});
  }
  // Ids stay on the host: embedding validates them there and uploads them once itself.
  Tensor x = ops::add(ops::embedding(p("wte.weight"), Tensor::from_vector(tokens)),
                      ops::embedding(p("wpe.weight"), Tensor::from_vector(positions)));  // (T, C)
  x = ops::dropout(x, config_.dropout, random::derive(o.dropout_seed, 0), dropout_rows(slice),
                   o.training);
  x = tap(x, "embed", o.sink, rows);
  for (int64_t l = 0; l < config_.n_layer; ++l) x = block(l, x, slice, o, rows);
  x = ops::layer_norm(x, p("ln_f.weight"), p("ln_f.bias"));
  return tap(x, "ln_f", o.sink, rows);
}

Tensor Gpt::block(int64_t l, const Tensor& x, const std::vector<SliceInput>& slice,
                  const ForwardOptions& o, const std::vector<RowBlock>& rows) {
  // Without taps and dropout the residual sums ride in the output projections' GEMMs (one
  // rounding, no add pass); with either, the branch outputs exist on their own.
  const bool fused_residual = !o.sink && (!o.training || config_.dropout == 0);
  Tensor h = ops::layer_norm(x, p(layer_name(l, "ln_1.weight")), p(layer_name(l, "ln_1.bias")));
  h = tap(h, layer_name(l, "ln_1"), o.sink, rows);
  Tensor r;
  if (fused_residual) {
    r = self_attention(l, h, slice, o, rows, x);
  } else {
    Tensor a = self_attention(l, h, slice, o, rows);
    a = ops::dropout(a, config_.dropout, random::derive(o.dropout_seed, 2 * l + 1),
                     dropout_rows(slice), o.training);
    r = ops::add(x, tap(a, layer_name(l, "attn"), o.sink, rows));
  }
  Tensor m = ops::layer_norm(r, p(layer_name(l, "ln_2.weight")), p(layer_name(l, "ln_2.bias")));
  m = tap(m, layer_name(l, "ln_2"), o.sink, rows);
  auto mlp_of = [&](const Tensor& in, const Tensor& residual) {
    return mlp(in, p(layer_name(l, "mlp.c_fc.weight")), p(layer_name(l, "mlp.c_fc.bias")),
               p(layer_name(l, "mlp.c_proj.weight")), p(layer_name(l, "mlp.c_proj.bias")),
               residual);
  };
  Tensor out;
  if (fused_residual) {
    out = mlp_of(m, r);
  } else {
    m = mlp_of(m, Tensor());
    m = ops::dropout(m, config_.dropout, random::derive(o.dropout_seed, 2 * l + 2),
                     dropout_rows(slice), o.training);
    out = ops::add(r, tap(m, layer_name(l, "mlp"), o.sink, rows));
  }
  return tap(out, layer_name(l, "out"), o.sink, rows);
}

Tensor Gpt::self_attention(int64_t l, const Tensor& x, const std::vector<SliceInput>& slice,
                           const ForwardOptions& o, const std::vector<RowBlock>& rows,
                           const Tensor& residual) {
  const int64_t H = config_.n_head, Hkv = config_.kv_heads(), D = config_.head_dim();
  Tensor qkv = linear(x, p(layer_name(l, "attn.c_attn.weight")),
                      p(layer_name(l, "attn.c_attn.bias")));  // (T, (H + 2 Hkv) D)
  qkv = tap(qkv, layer_name(l, "attn.qkv"), o.sink, rows);
  if (o.context_parallel != ContextParallel::none) {
    Tensor y = context_parallel_core(l, qkv, slice, o);
    y = tap(y, layer_name(l, "attn.core"), o.sink, rows);
    return linear(y, p(layer_name(l, "attn.c_proj.weight")), p(layer_name(l, "attn.c_proj.bias")),
                  residual);
  }
  auto parts = ops::split(qkv, {H * D, Hkv * D, Hkv * D}, 1);
  const int64_t T = x.size(0);
  Tensor q = ops::reshape(parts[0], {T, H, D});
  Tensor k = ops::reshape(parts[1], {T, Hkv, D});
  Tensor v = ops::reshape(parts[2], {T, Hkv, D});
  const bool in_fault_layer = o.faults && o.faults->layer == l;
  KvFaults kv_faults;
  kv_faults.drop_grad_slice = in_fault_layer && o.faults->drop_kv_grad_slice;
  kv_faults.skip_reduce_scatter = in_fault_layer && o.faults->skip_kv_reduce_scatter;
  const bool any_kv_fault = kv_faults.drop_grad_slice || kv_faults.skip_reduce_scatter;
  // Every sequence of the slice writes its K/V slice and reads its extent; then ONE
  // attention call covers the whole slice: the documents of all sequences in one varlen
  // layout, their K/V extents side by side. Documents never see each other, so this is
  // the per-sequence computation with one launch (and one autograd node) per layer.
  std::vector<AttentionSpec> specs;
  std::vector<int64_t> k_rows;
  for (const auto& s : slice) {
    specs.push_back(spec_from_input(*s.input, in_fault_layer && o.faults->cu_seqlens_k_from_begin));
    k_rows.push_back(s.input->sequence_k_end - s.input->first_document_begin);
  }
  AttentionSpec spec = merge_specs(specs, k_rows);
  spec.deterministic = o.deterministic;
  KvBuffer& buffer = kv_buffers_[size_t(l)];
  Tensor k_all, v_all;  // (sum of K extents, H_kv, D)
  const bool one_rank = !any_kv_fault && (!o.exchange || o.exchange->ranks() == 1);
  // Whole sequences (one micro-sequence, one rank): each sequence's K extent is its own rows.
  const bool own_rows_only = std::all_of(slice.begin(), slice.end(), [](const SliceInput& s) {
    const data::ModelInput& in = *s.input;
    return in.micro_sequences == 1 && in.sdp_size == 1 && in.first_document_begin == 0 &&
           in.sequence_k_past == 0 && in.sequence_k_end == in.sequence_length &&
           in.num_queries() == in.sequence_length;
  });
  if (o.kv_direct && one_rank && own_rows_only) {
    // Each sequence's K extent is its own rows: k and v as they come (rows of the QKV
    // product; the attention kernels read them in place).
    k_all = k;
    v_all = v;
  } else if (one_rank && buffer.kv().defined() && whole_sequences(slice, buffer.kv().size(1))) {
    // Whole sequences in adjacent slots (no micro-sequences, no SDP): their K/V rows are one
    // run of the buffer, written and read with one copy each.
    const int64_t n = int64_t(slice.size()), run = n * buffer.kv().size(1);
    std::tie(k_all, v_all) =
        kv_write_read(buffer, KvSlice{slice[0].slot, 0, run, 0, -1, n}, k, v, o.exchange);
  } else {
    // The per-sequence rows of K and V come from ONE split each: its backward assembles the
    // gradient once (a narrow per sequence would materialise a full-size zero gradient per
    // sequence and sum them, quadratic in the sequences of the slice).
    std::vector<int64_t> q_rows;
    for (const auto& s : slice) q_rows.push_back(s.input->num_queries());
    const std::vector<Tensor> k_q = ops::split(k, q_rows, 0), v_q = ops::split(v, q_rows, 0);
    std::vector<Tensor> k_parts, v_parts;
    for (size_t i = 0; i < slice.size(); ++i) {
      const data::ModelInput& in = *slice[i].input;
      KvSlice ks{slice[i].slot, in.sequence_k_past, in.sequence_k_end, in.first_document_begin,
                 o.full_kv_exchange ? -1 : in.exchange_rows};
      auto [k_ext, v_ext] = kv_write_read(buffer, ks, k_q[i], v_q[i], o.exchange,
                                          any_kv_fault ? &kv_faults : nullptr);
      k_parts.push_back(k_ext);
      v_parts.push_back(v_ext);
    }
    k_all = k_parts.size() == 1 ? k_parts[0] : ops::concat(k_parts, 0);
    v_all = v_parts.size() == 1 ? v_parts[0] : ops::concat(v_parts, 0);
  }
  spec.score_mod = score_mod(0, H);
  Tensor y = attention(q, k_all, v_all, spec);  // (T, H, D)
  y = ops::reshape(y, {T, H * D});
  y = tap(y, layer_name(l, "attn.core"), o.sink, rows);
  return linear(y, p(layer_name(l, "attn.c_proj.weight")), p(layer_name(l, "attn.c_proj.bias")),
                residual);
}

Tensor Gpt::context_parallel_core(int64_t l, const Tensor& qkv,
                                  const std::vector<SliceInput>& slice, const ForwardOptions& o) {
  static KvExchange single_rank;
  KvExchange& ex = o.exchange ? *o.exchange : single_rank;
  const int64_t H = config_.n_head, Hkv = config_.kv_heads(), D = config_.head_dim();
  const int64_t T = qkv.size(0), P = ex.ranks();
  KvBuffer& buffer = kv_buffers_[size_t(l)];
  if (o.context_parallel == ContextParallel::ring) {
    DL_CHECK(slice.size() % 2 == 0, "gpt", "ring: the slice must list two chunks per sequence");
    std::vector<RingSequence> seqs;
    for (size_t j = 0; j < slice.size(); j += 2) {
      DL_CHECK(slice[j].slot == slice[j + 1].slot, "gpt",
               "ring: the two chunks of a sequence must share a K/V slot");
      seqs.push_back({{slice[j].input, slice[j + 1].input}, slice[j].slot});
    }
    auto parts = ops::split(qkv, {H * D, Hkv * D, Hkv * D}, 1);
    AttentionSpec base;
    base.score_mod = score_mod(0, H);
    base.deterministic = o.deterministic;
    Tensor y = ring_attention(ops::reshape(parts[0], {T, H, D}), ops::reshape(parts[1], {T, Hkv, D}),
                              ops::reshape(parts[2], {T, Hkv, D}), seqs, buffer, ex, base);
    return ops::reshape(y, {T, H * D});
  }
  // a2a: this rank's heads over every row of the micro-sequence.
  const int64_t n = int64_t(slice.size()), Hp = H / P, Hkvp = Hkv / P;
  Tensor heads = tokens_to_heads(qkv, n, H, Hkv, ex);  // (n L, (Hp + 2 Hkvp) D)
  const int64_t L = heads.size(0) / n;
  auto parts = ops::split(heads, {Hp * D, Hkvp * D, Hkvp * D}, 1);
  Tensor q = ops::reshape(parts[0], {n * L, Hp, D});
  const std::vector<int64_t> rows_of(size_t(n), L);
  const std::vector<Tensor> k_q = ops::split(ops::reshape(parts[1], {n * L, Hkvp, D}), rows_of, 0);
  const std::vector<Tensor> v_q = ops::split(ops::reshape(parts[2], {n * L, Hkvp, D}), rows_of, 0);
  std::vector<AttentionSpec> specs;
  std::vector<int64_t> k_rows;
  std::vector<Tensor> k_parts, v_parts;
  for (int64_t j = 0; j < n; ++j) {
    const data::ModelInput* w = slice[size_t(j)].whole;
    const data::ModelInput& local = *slice[size_t(j)].input;
    DL_CHECK(w && w->num_queries() == L, "gpt",
             "a2a: sequence " << j << " needs its whole micro-sequence of " << L << " rows");
    DL_CHECK(local.sdp_size == P && local.sdp_rank == ex.rank() &&
                 local.micro_sequence == w->micro_sequence &&
                 local.sequence_k_past == w->sequence_k_past + ex.rank() * (L / P),
             "gpt",
             "a2a: sequence " << j << " must hold chunk " << ex.rank() << " of " << P
                              << " of micro-sequence " << w->micro_sequence << ", got chunk "
                              << local.sdp_rank << " of " << local.sdp_size
                              << " of micro-sequence " << local.micro_sequence);
    specs.push_back(spec_from_input(*w, false));
    k_rows.push_back(w->num_keys());
    // The buffer holds this rank's heads of every row: one rank's exchange, no collective.
    auto [k_ext, v_ext] = kv_write_read(
        buffer, KvSlice{slice[size_t(j)].slot, w->sequence_k_past, w->sequence_k_end,
                        w->first_document_begin, -1},
        k_q[size_t(j)], v_q[size_t(j)]);
    k_parts.push_back(k_ext);
    v_parts.push_back(v_ext);
  }
  AttentionSpec spec = merge_specs(specs, k_rows);
  spec.deterministic = o.deterministic;
  spec.score_mod = score_mod(ex.rank() * Hp, Hp);
  Tensor y = attention(q, n == 1 ? k_parts[0] : ops::concat(k_parts, 0),
                       n == 1 ? v_parts[0] : ops::concat(v_parts, 0), spec);  // (n L, Hp, D)
  return heads_to_tokens(ops::reshape(y, {n * L, Hp * D}), n, ex);
}

Tensor Gpt::logits(const std::vector<SliceInput>& slice, const ForwardOptions& o) {
  std::vector<RowBlock> rows;
  Tensor x = hidden(slice, o, rows);
  return linear(x, p("wte.weight"), Tensor());  // (T, V), tied head
}

Tensor Gpt::loss(const std::vector<SliceInput>& slice, double loss_scale, const ForwardOptions& o) {
  std::vector<RowBlock> rows;
  Tensor x = hidden(slice, o, rows);  // (T, C)
  std::vector<int32_t> labels;
  std::vector<float> mask;
  for (const auto& s : slice) {
    for (size_t t = 0; t < s.input->labels.size(); ++t) {
      const int32_t lab = s.input->labels[t];
      labels.push_back(lab >= 0 ? lab : 0);
      mask.push_back(s.input->loss_mask[t] ? 1.0f : 0.0f);
    }
  }
  // Tied head and cross-entropy in one chunked node: the (T, V) logits never exist whole.
  return lm_loss(x, p("wte.weight"), Tensor::from_vector(labels), Tensor::from_vector(mask),
                 loss_scale, 0, o.recompute_loss);
}

}  // namespace driftless::layers
