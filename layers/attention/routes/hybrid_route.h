// The hybrid context-parallel route (route.h; ARCHITECTURE.md "Context parallelism", hybrid):
// all-to-all inside groups of G ranks and the ring across the P / G groups, so P may exceed
// the K/V heads. It composes tokens_to_heads / heads_to_tokens and ring_attention.
#pragma once
#include <vector>

#include "layers/attention/kv_buffer.h"
#include "layers/attention/routes/buffered_route.h"

namespace driftless::layers {

// group: the G ranks of this rank's all-to-all group (rank = position % G); ring: the P / G
// ranks with the same position in their groups (rank = position / G). The slice lists two
// entries per sequence sharing a slot: this rank's pieces of the group's ring chunks, each
// with PartInput::whole = that ring chunk (SequencePart {i, m, chunk, 2 P / G}).
class HybridRoute : public BufferedRoute {
 public:
  HybridRoute(KvExchange* group, KvExchange* ring) : group_(group), ring_(ring) {}
  Tensor attend(const RouteCall& call, const Tensor& qkv) override;

 private:
  // Buffers of H_kv / G heads (the ring's over the group's heads); throws unless G divides H_kv.
  int64_t buffer_kv_heads(const AttentionShape& shape) const override;
  KvExchange& group() const { return exchange_or_single(group_); }
  KvExchange& ring() const { return exchange_or_single(ring_); }
  KvExchange* group_;  // nullptr: this rank alone
  KvExchange* ring_;
};

}  // namespace driftless::layers
