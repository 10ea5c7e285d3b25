// The base of the routes that keep per-layer K/V buffers (route.h; ARCHITECTURE.md "K/V
// buffers"): the buffer route, the ring, the all-to-all and the hybrid. It allocates the
// buffers once, clears their gradients before each depth-first group and counts their bytes;
// a route says only how many K/V heads its buffers hold and attends.
#pragma once
#include <vector>

#include "layers/attention/kv_buffer.h"
#include "layers/attention/routes/route.h"

namespace driftless::layers {

class BufferedRoute : public AttentionRoute {
 public:
  void prepare(const AttentionShape& shape, int64_t slots, int64_t sequence_length, DType dtype,
               Device device) final;
  void zero_grads() final;
  int64_t buffer_bytes() const final;

 protected:
  // The K/V heads each layer's buffer holds: all of them, or this rank's share of them
  // (throws when the ranks do not divide them).
  virtual int64_t buffer_kv_heads(const AttentionShape& shape) const { return shape.kv_heads; }
  // Layer `layer`'s buffer; throws when the route was not prepared.
  KvBuffer& buffer(int64_t layer);

 private:
  std::vector<KvBuffer> buffers_;  // one per layer
};

}  // namespace driftless::layers
