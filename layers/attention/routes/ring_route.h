// The ring route (route.h): context parallelism with K/V chunks passed around the ranks
// that share a sequence (ring_attention, context_parallel.h). The slice lists chunks r and
// 2P-1-r of each sequence as two consecutive entries sharing a K/V slot.
#pragma once
#include <vector>

#include "layers/attention/kv_buffer.h"
#include "layers/attention/routes/route.h"

namespace driftless::layers {

class RingRoute : public AttentionRoute {
 public:
  explicit RingRoute(KvExchange* exchange = nullptr) : exchange_(exchange) {}
  Tensor attend(const RouteCall& call, const Tensor& qkv) override;
  void prepare(const AttentionShape& shape, int64_t slots, int64_t sequence_length, DType dtype,
               Device device) override;
  void zero_grads() override;
  int64_t buffer_bytes() const override;

 private:
  KvExchange* exchange_;  // nullptr: this rank alone
  std::vector<KvBuffer> buffers_;
};

}  // namespace driftless::layers
