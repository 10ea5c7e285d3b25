// The all-to-all route (route.h; ARCHITECTURE.md "Context parallelism", a2a): all_to_all
// from this rank's rows of all heads to all rows of this rank's heads, attention over the
// whole micro-sequence (SliceInput::whole) with a K/V buffer of those heads, and back.
#pragma once
#include <vector>

#include "layers/attention/kv_buffer.h"
#include "layers/attention/routes/route.h"

namespace driftless::layers {

class AllToAllRoute : public AttentionRoute {
 public:
  explicit AllToAllRoute(KvExchange* exchange = nullptr) : exchange_(exchange) {}
  Tensor attend(const RouteCall& call, const Tensor& qkv) override;
  // Buffers of H_kv / P heads; throws unless the ranks divide H_kv.
  void prepare(const AttentionShape& shape, int64_t slots, int64_t sequence_length, DType dtype,
               Device device) override;
  void zero_grads() override;
  int64_t buffer_bytes() const override;

 private:
  KvExchange& exchange() const;
  KvExchange* exchange_;  // nullptr: this rank alone
  std::vector<KvBuffer> buffers_;
};

}  // namespace driftless::layers
