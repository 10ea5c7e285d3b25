// The buffer route (route.h; ARCHITECTURE.md "K/V buffers"): each sequence writes its K/V
// rows into the per-layer buffers and attends its extent, all-gathered over the ranks that
// share a sequence (SDP); on one rank, micro-sequences and generation's K/V cache.
#pragma once
#include <vector>

#include "layers/attention/kv_buffer.h"
#include "layers/attention/routes/route.h"

namespace driftless::layers {

class BufferRoute : public AttentionRoute {
 public:
  // exchange: the ranks sharing a sequence (nullptr: this rank alone). full_exchange: move
  // whole chunks instead of only the rows other ranks read (ModelInput::exchange_rows;
  // distributed.kv_exchange: full).
  explicit BufferRoute(KvExchange* exchange = nullptr, bool full_exchange = false)
      : exchange_(exchange), full_exchange_(full_exchange) {}
  Tensor attend(const RouteCall& call, const Tensor& qkv) override;
  void prepare(const AttentionShape& shape, int64_t slots, int64_t sequence_length, DType dtype,
               Device device) override;
  void zero_grads() override;
  int64_t buffer_bytes() const override;

 private:
  KvExchange* exchange_;
  bool full_exchange_;
  std::vector<KvBuffer> buffers_;  // one per layer
};

// Per-layer K/V buffers of `kv_heads` heads, for the routes that keep them.
void prepare_buffers(std::vector<KvBuffer>& buffers, const AttentionShape& shape, int64_t kv_heads,
                     int64_t slots, int64_t sequence_length, DType dtype, Device device);
KvBuffer& buffer_of(std::vector<KvBuffer>& buffers, int64_t layer);
// Every layer's K/V gradient cleared; the bytes the buffers hold.
void zero_buffer_grads(std::vector<KvBuffer>& buffers);
int64_t buffers_bytes(const std::vector<KvBuffer>& buffers);

}  // namespace driftless::layers
