// The ring route (ring_route.h).
#include "layers/attention/routes/ring_route.h"

#include "engine/ops/ops.h"
#include "layers/attention/context_parallel.h"
#include "layers/attention/routes/buffer_route.h"

namespace driftless::layers {

void RingRoute::prepare(const AttentionShape& shape, int64_t slots, int64_t sequence_length,
                        DType dtype, Device device) {
  prepare_buffers(buffers_, shape, shape.kv_heads, slots, sequence_length, dtype, device);
}

void RingRoute::zero_grads() {
  for (auto& b : buffers_) b.zero_grad();
}

int64_t RingRoute::buffer_bytes() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n += b.bytes();
  return n;
}

Tensor RingRoute::attend(const RouteCall& call, const Tensor& qkv) {
  static KvExchange single_rank;
  KvExchange& ex = exchange_ ? *exchange_ : single_rank;
  const AttentionShape& a = call.shape;
  const std::vector<SliceInput>& slice = *call.slice;
  DL_CHECK(slice.size() % 2 == 0, "ring route", "the slice must list two chunks per sequence");
  std::vector<RingSequence> seqs;
  for (size_t j = 0; j < slice.size(); j += 2) {
    DL_CHECK(slice[j].slot == slice[j + 1].slot, "ring route",
             "the two chunks of a sequence must share a K/V slot");
    seqs.push_back({{slice[j].input, slice[j + 1].input}, slice[j].slot});
  }
  const QkvParts p = split_qkv(qkv, a.heads, a.kv_heads, a.head_dim);
  AttentionSpec base;
  base.score_mod = call.score_mod(0, a.heads);
  base.deterministic = call.deterministic;
  Tensor y = ring_attention(p.q, p.k, p.v, seqs, buffer_of(buffers_, call.layer), ex, base);
  return ops::reshape(y, {qkv.size(0), a.heads * a.head_dim});
}

}  // namespace driftless::layers
