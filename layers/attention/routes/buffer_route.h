// The buffer route (route.h): K/V through the per-layer K/V buffers (ARCHITECTURE.md "K/V
// buffers"), all-gathered over the ranks that share a sequence (sequence-data parallelism;
// the single-rank exchange: micro-sequences on one rank, generation's K/V cache). Each
// sequence writes its rows at [sequence_k_past, sequence_k_end) and attends its extent
// [first_document_begin, sequence_k_end); then one attention call covers the whole slice.
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

}  // namespace driftless::layers
