// The local route (local_route.h).
#include "layers/attention/routes/local_route.h"

#include "engine/ops/ops.h"
#include "layers/attention/attention.h"

namespace driftless::layers {

Tensor LocalRoute::attend(const RouteCall& call, const Tensor& qkv) {
  const AttentionShape& a = call.shape;
  std::vector<AttentionSpec> specs;
  std::vector<int64_t> k_rows;
  for (const PartInput& s : *call.slice) {
    const data::ModelInput& in = *s.input;
    DL_CHECK(in.micro_sequences == 1 && in.chunks == 1 && in.first_document_begin == 0 &&
                 in.query_begin == 0 && in.query_end == in.sequence_length &&
                 in.num_queries() == in.sequence_length,
             "local route",
             "expected whole sequences (one micro-sequence, one rank), got rows ["
                 << in.query_begin << ", " << in.query_end << ") of " << in.sequence_length
                 << " in micro-sequence " << in.micro_sequence << " of " << in.micro_sequences
                 << " on rank " << in.chunk << " of " << in.chunks << " (use the buffer route)");
    specs.push_back(spec_from_input(in));
    k_rows.push_back(in.num_keys());
  }
  AttentionSpec spec = merge_specs(specs, k_rows);
  spec.deterministic = call.deterministic;
  spec.window_left = call.window_left;
  spec.score_mod = call.score_mod(0, a.heads);
  // Each sequence's K extent is its own rows: k and v as they come (rows of the QKV
  // product; the attention kernels read them in place).
  const QkvParts p = split_qkv(qkv, a.heads, a.kv_heads, a.head_dim);
  Tensor y = attention(p.q, p.k, p.v, spec);  // (T, H, D)
  return ops::reshape(y, {qkv.size(0), a.heads * a.head_dim});
}

}  // namespace driftless::layers
