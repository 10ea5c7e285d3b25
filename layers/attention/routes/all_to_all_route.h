// The all-to-all route (route.h): Ulysses context parallelism. One all_to_all turns this
// rank's rows of all heads into all rows of this rank's heads (tokens_to_heads,
// context_parallel.h), attention runs over the whole micro-sequence for those heads with a
// K/V buffer of this rank's heads (no collective on the buffer), and the inverse all_to_all
// brings the output back. Each slice entry carries its whole micro-sequence
// (SliceInput::whole).
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
