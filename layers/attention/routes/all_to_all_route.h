// The all-to-all route (route.h; ARCHITECTURE.md "Context parallelism", a2a): all_to_all
// from this rank's rows of all heads to all rows of this rank's heads, attention over the
// whole micro-sequence (PartInput::whole) with a K/V buffer of those heads, and back.
#pragma once
#include <vector>

#include "layers/attention/kv_buffer.h"
#include "layers/attention/routes/buffered_route.h"

namespace driftless::layers {

// qkv (T, (H + 2 H_kv) D): n sequences' local rows, T / n = L / P each (this rank's chunk of
// every micro-sequence, SDP's split) -> (n L, (H + 2 H_kv) D / P): each sequence's L rows in
// order with this rank's heads, q heads [r H/P, (r+1) H/P) then k and v heads
// [r H_kv/P, (r+1) H_kv/P). One all-to-all; one autograd node (backward: the inverse).
Tensor tokens_to_heads(const Tensor& qkv, int64_t sequences, int64_t heads, int64_t kv_heads,
                       KvExchange& ex);
// y (n L, H D / P) -> (T, H D): the attention output back to this rank's rows, all heads.
Tensor heads_to_tokens(const Tensor& y, int64_t sequences, KvExchange& ex);

class AllToAllRoute : public BufferedRoute {
 public:
  explicit AllToAllRoute(KvExchange* exchange = nullptr) : exchange_(exchange) {}
  Tensor attend(const RouteCall& call, const Tensor& qkv) override;

 private:
  // Buffers of H_kv / P heads; throws unless the ranks divide H_kv.
  int64_t buffer_kv_heads(const AttentionShape& shape) const override;
  KvExchange& exchange() const { return exchange_or_single(exchange_); }
  KvExchange* exchange_;  // nullptr: this rank alone
};

}  // namespace driftless::layers
