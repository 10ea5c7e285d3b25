// The buffer route (buffer_route.h).
#include "layers/attention/routes/buffer_route.h"

#include <tuple>

#include "engine/ops/ops.h"
#include "layers/attention/attention.h"

namespace driftless::layers {

namespace {

// Whether the slice is whole sequences of s rows (no past, no micro-sequence split) in
// adjacent buffer slots.
bool whole_sequences(const std::vector<PartInput>& slice, int64_t s) {
  for (size_t i = 0; i < slice.size(); ++i) {
    const data::ModelInput& in = *slice[i].input;
    if (in.first_document_begin != 0 || in.query_begin != 0 || in.query_end != s ||
        in.num_queries() != s || slice[i].slot != slice[0].slot + int64_t(i))
      return false;
  }
  return true;
}

}  // namespace

Tensor BufferRoute::attend(const RouteCall& call, const Tensor& qkv) {
  const AttentionShape& a = call.shape;
  const std::vector<PartInput>& slice = *call.slice;
  const QkvParts p = split_qkv(qkv, a.heads, a.kv_heads, a.head_dim);
  // Every sequence of the slice writes its K/V slice and reads its extent; then ONE
  // attention call covers the whole slice: the documents of all sequences in one varlen
  // layout, their K/V extents side by side. Documents never see each other, so this is
  // the per-sequence computation with one launch (and one autograd node) per layer.
  std::vector<AttentionSpec> specs;
  std::vector<int64_t> k_rows;
  for (const auto& s : slice) {
    specs.push_back(spec_from_input(*s.input));
    k_rows.push_back(s.input->query_end - s.input->first_document_begin);
  }
  AttentionSpec spec = merge_specs(specs, k_rows);
  spec.deterministic = call.deterministic;
  spec.window_left = call.window_left;
  KvBuffer& buffer = this->buffer(call.layer);
  Tensor k_all, v_all;  // (sum of K extents, H_kv, D)
  const bool one_rank = !exchange_ || exchange_->ranks() == 1;
  if (one_rank && whole_sequences(slice, buffer.kv().size(1))) {
    // Whole sequences in adjacent slots (no micro-sequences, no SDP): their K/V rows are one
    // run of the buffer, written and read with one copy each.
    const int64_t n = int64_t(slice.size()), run = n * buffer.kv().size(1);
    std::tie(k_all, v_all) =
        kv_write_read(buffer, KvRows{slice[0].slot, 0, run, 0, -1, n}, p.k, p.v, exchange_);
  } else {
    // The per-sequence rows of K and V come from ONE split each: its backward assembles the
    // gradient once (a narrow per sequence would materialise a full-size zero gradient per
    // sequence and sum them, quadratic in the sequences of the slice).
    std::vector<int64_t> q_rows;
    for (const auto& s : slice) q_rows.push_back(s.input->num_queries());
    const std::vector<Tensor> k_q = ops::split(p.k, q_rows, 0), v_q = ops::split(p.v, q_rows, 0);
    std::vector<Tensor> k_parts, v_parts;
    for (size_t i = 0; i < slice.size(); ++i) {
      const data::ModelInput& in = *slice[i].input;
      KvRows ks{slice[i].slot, in.query_begin, in.query_end, in.first_document_begin,
                full_exchange_ ? -1 : in.exchange_rows};
      auto [k_ext, v_ext] = kv_write_read(buffer, ks, k_q[i], v_q[i], exchange_);
      k_parts.push_back(k_ext);
      v_parts.push_back(v_ext);
    }
    k_all = k_parts.size() == 1 ? k_parts[0] : ops::concat(k_parts, 0);
    v_all = v_parts.size() == 1 ? v_parts[0] : ops::concat(v_parts, 0);
  }
  spec.score_mod = call.score_mod(0, a.heads);
  Tensor y = attention(p.q, k_all, v_all, spec);  // (T, H, D)
  return ops::reshape(y, {qkv.size(0), a.heads * a.head_dim});
}

}  // namespace driftless::layers
