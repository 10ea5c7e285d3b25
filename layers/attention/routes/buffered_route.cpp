// The base of the routes that keep K/V buffers (buffered_route.h).
#include "layers/attention/routes/buffered_route.h"

#include "engine/core/error.h"

namespace driftless::layers {

void BufferedRoute::prepare(const AttentionShape& shape, int64_t slots, int64_t sequence_length,
                            DType dtype, Device device) {
  const int64_t kv_heads = buffer_kv_heads(shape);
  buffers_.resize(size_t(shape.layers));
  for (auto& b : buffers_)
    b.ensure(slots, sequence_length, kv_heads, shape.head_dim, dtype, device, DType::f32);
}

void BufferedRoute::zero_grads() {
  for (auto& b : buffers_) b.zero_grad();
}

int64_t BufferedRoute::buffer_bytes() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n += b.bytes();
  return n;
}

KvBuffer& BufferedRoute::buffer(int64_t layer) {
  DL_CHECK(layer >= 0 && layer < int64_t(buffers_.size()) && buffers_[size_t(layer)].kv().defined(),
           "attention route",
           "no K/V buffer for layer " << layer << " (prepare the route with the model first)");
  return buffers_[size_t(layer)];
}

}  // namespace driftless::layers
