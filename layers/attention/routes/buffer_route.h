// The buffer route (route.h; ARCHITECTURE.md "K/V buffers"): each sequence writes its K/V
// rows into the per-layer buffers and attends its extent, all-gathered over the ranks that
// share a sequence (SDP); on one rank, micro-sequences and generation's K/V cache.
#pragma once
#include <vector>

#include "layers/attention/kv_buffer.h"
#include "layers/attention/routes/buffered_route.h"

namespace driftless::layers {

class BufferRoute : public BufferedRoute {
 public:
  // exchange: the ranks sharing a sequence (nullptr: this rank alone). full_exchange: move
  // whole chunks instead of only the rows other ranks read (ModelInput::exchange_rows;
  // distributed.kv_exchange: full).
  explicit BufferRoute(KvExchange* exchange = nullptr, bool full_exchange = false)
      : exchange_(exchange), full_exchange_(full_exchange) {}
  Tensor attend(const RouteCall& call, const Tensor& qkv) override;

 private:
  KvExchange* exchange_;
  bool full_exchange_;
};

}  // namespace driftless::layers
