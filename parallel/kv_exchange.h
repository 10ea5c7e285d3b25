// The SDP K/V exchange (ARCHITECTURE.md "Data flow": K/V all-gathered straight into the buffer
// slice, K/V gradients reduce-scattered) as KvExchange over the sdp communicator.
// Depends on the interface header engine/core/kv_exchange.h only (no link, no buffers).
#pragma once
#include <memory>

#include "engine/core/kv_exchange.h"
#include "parallel/communicator.h"

namespace driftless::parallel {

class CommKvExchange final : public KvExchange {
 public:
  // sdp: the ranks sharing a sequence; it must outlive this exchange.
  explicit CommKvExchange(Communicator& sdp) : sdp_(sdp) {}
  int64_t ranks() const override { return sdp_.size(); }
  int64_t rank() const override { return sdp_.rank(); }
  // span (L, 2, H_kv, D), contiguous: chunk rank() (L/P rows) is filled; fills the others
  // (with rows in [1, L/P): only their last `rows` rows, packed into one collective).
  void all_gather(const Tensor& span, int64_t rows = -1) override;
  // grad span (L, 2, H_kv, D): chunk rank() becomes the rank-order sum of every rank's
  // chunk rank() (with rows in [1, L/P): its last `rows` rows; the rows before them keep
  // this rank's values, which no other rank adds to); the other chunks keep this rank's
  // partial values.
  void reduce_scatter(const Tensor& grad_span, int64_t rows = -1) override;
  void reduce_scatter_packed(const Tensor& packed) override;
  void all_to_all(const Tensor& out, const Tensor& in) override {
    sdp_.all_to_all_ordered(out, in);
  }

 private:
  void check_span(const char* op, const Tensor& span) const;
  // (P, rows, ...) view of the last `rows` rows of each chunk of span.
  Tensor chunk_tails(const Tensor& span, int64_t rows) const;
  Communicator& sdp_;
};

// For callers that should not name the class (the trainer wires this into GptModel).
std::unique_ptr<KvExchange> make_kv_exchange(Communicator& sdp);

}  // namespace driftless::parallel
