// The all-to-all route (all_to_all_route.h).
#include "layers/attention/routes/all_to_all_route.h"

#include "engine/ops/ops.h"
#include "layers/attention/attention.h"
#include "layers/attention/context_parallel.h"
#include "layers/attention/routes/buffer_route.h"

namespace driftless::layers {

KvExchange& AllToAllRoute::exchange() const {
  static KvExchange single_rank;
  return exchange_ ? *exchange_ : single_rank;
}

void AllToAllRoute::prepare(const AttentionShape& shape, int64_t slots, int64_t sequence_length,
                            DType dtype, Device device) {
  const int64_t P = exchange().ranks();
  DL_CHECK(shape.kv_heads % P == 0, "all-to-all route",
           "n_kv_head " << shape.kv_heads << " does not divide into " << P << " head groups");
  prepare_buffers(buffers_, shape, shape.kv_heads / P, slots, sequence_length, dtype, device);
}

void AllToAllRoute::zero_grads() {
  for (auto& b : buffers_) b.zero_grad();
}

int64_t AllToAllRoute::buffer_bytes() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n += b.bytes();
  return n;
}

Tensor AllToAllRoute::attend(const RouteCall& call, const Tensor& qkv) {
  KvExchange& ex = exchange();
  const std::vector<SliceInput>& slice = *call.slice;
  const int64_t H = call.shape.heads, Hkv = call.shape.kv_heads, D = call.shape.head_dim;
  const int64_t P = ex.ranks(), n = int64_t(slice.size()), Hp = H / P, Hkvp = Hkv / P;
  KvBuffer& buffer = buffer_of(buffers_, call.layer);
  // This rank's heads over every row of the micro-sequence.
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
    DL_CHECK(w && w->num_queries() == L, "all-to-all route",
             "sequence " << j << " needs its whole micro-sequence of " << L << " rows");
    DL_CHECK(local.sdp_size == P && local.sdp_rank == ex.rank() &&
                 local.micro_sequence == w->micro_sequence &&
                 local.sequence_k_past == w->sequence_k_past + ex.rank() * (L / P),
             "all-to-all route",
             "sequence " << j << " must hold chunk " << ex.rank() << " of " << P
                         << " of micro-sequence " << w->micro_sequence << ", got chunk "
                         << local.sdp_rank << " of " << local.sdp_size << " of micro-sequence "
                         << local.micro_sequence);
    specs.push_back(spec_from_input(*w));
    k_rows.push_back(w->num_keys());
    // The buffer holds this rank's heads of every row: one rank's exchange, no collective.
    auto [k_ext, v_ext] = kv_write_read(buffer,
                                        KvSlice{slice[size_t(j)].slot, w->sequence_k_past,
                                                w->sequence_k_end, w->first_document_begin, -1},
                                        k_q[size_t(j)], v_q[size_t(j)]);
    k_parts.push_back(k_ext);
    v_parts.push_back(v_ext);
  }
  AttentionSpec spec = merge_specs(specs, k_rows);
  spec.deterministic = call.deterministic;
  spec.score_mod = call.score_mod(ex.rank() * Hp, Hp);
  Tensor y = attention(q, n == 1 ? k_parts[0] : ops::concat(k_parts, 0),
                       n == 1 ? v_parts[0] : ops::concat(v_parts, 0), spec);  // (n L, Hp, D)
  return heads_to_tokens(ops::reshape(y, {n * L, Hp * D}), n, ex);
}

}  // namespace driftless::layers
