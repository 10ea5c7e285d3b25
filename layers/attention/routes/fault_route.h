// Test faults that regression must catch (tests/e2e/regress/faults.yaml,
// configs/regress/demo_fault.yaml), planted by a route that wraps the real one: only
// `driftless train` under DRIFTLESS_TEST_FAULT and the tests build it.
#pragma once
#include <functional>
#include <memory>

#include "layers/attention/kv_buffer.h"
#include "layers/attention/routes/route.h"

namespace driftless::layers {

struct TestFaults {
  int64_t layer = -1;                    // which layer the route faults are in (-1: none)
  bool cu_seqlens_k_from_begin = false;  // cu_seqlens_k in absolute positions (micro-seq >= 1)
  bool drop_kv_grad_slice = false;       // the K/V projection gets no gradient
  bool skip_kv_reduce_scatter = false;   // SDP: K/V gradients are not summed over the ranks
  bool reverse_micro_sequences = false;  // micro-sequences run forward in the wrong order (plan)
  // Every part but a sequence's first (query_begin > 0: a later micro-sequence or rank) gets
  // positions one too high (plan): the off-by-one of a position continued across a boundary.
  bool shift_positions = false;
  // AdamW decays the norm gains too (trainer): a wrong weight-decay group, which only the
  // parameters after the update show.
  bool decay_norm_gains = false;
  bool any_route_fault() const {
    return layer >= 0 && (cu_seqlens_k_from_begin || drop_kv_grad_slice || skip_kv_reduce_scatter);
  }
};

class FaultRoute : public AttentionRoute {
 public:
  // make_inner builds the route to wrap over the exchange it is given (this route's own,
  // which forwards to `exchange` and drops the faulted layer's gradient sums).
  FaultRoute(const TestFaults& faults, KvExchange* exchange,
             const std::function<std::unique_ptr<AttentionRoute>(KvExchange*)>& make_inner);
  ~FaultRoute() override;
  Tensor attend(const RouteCall& call, const Tensor& qkv) override;
  void prepare(const AttentionShape& shape, int64_t slots, int64_t sequence_length, DType dtype,
               Device device) override {
    inner_->prepare(shape, slots, sequence_length, dtype, device);
  }
  void zero_grads() override { inner_->zero_grads(); }
  int64_t buffer_bytes() const override { return inner_->buffer_bytes(); }

 private:
  class Exchange;
  TestFaults faults_;
  std::unique_ptr<Exchange> exchange_;
  std::unique_ptr<AttentionRoute> inner_;
};

}  // namespace driftless::layers
