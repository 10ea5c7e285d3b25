// Test faults that the regression must catch (tests/e2e/regress/faults.yaml,
// configs/regress/demo_fault.yaml; docs/regression.md "Planted faults"): one object that wraps
// the trainer's route in layers::FaultRoute and rewrites its step plans. Only `driftless
// train` under DRIFTLESS_TEST_FAULT and the tests build it.
#pragma once
#include <string>

#include "layers/attention/routes/fault_route.h"
#include "train/step_hooks.h"

namespace driftless::train {

class TestFaults final : public StepHooks {
 public:
  // DRIFTLESS_TEST_FAULT's comma list: layer=N, cu_seqlens_k, drop_kv_grad,
  // skip_kv_reduce_scatter, reverse_micro_sequences, shift_positions, decay_norm_gains.
  static TestFaults parse(const std::string& list);

  layers::RouteFaults route_faults;      // in the route of one layer
  bool reverse_micro_sequences = false;  // micro-sequences run forward in the wrong order
  // Every part but a sequence's first (query_begin > 0: a later micro-sequence or rank) gets
  // positions one too high: the off-by-one of a position continued across a boundary.
  bool shift_positions = false;
  // AdamW decays the norm gains too: a wrong weight-decay group, which only the parameters
  // after the update show.
  bool decay_norm_gains = false;

  // The route faults live in the SDP K/V path: context parallelism refuses them.
  void check(const Layout& layout) const override;
  // A FaultRoute over the layout's route, which keeps its K/V buffers.
  std::unique_ptr<layers::AttentionRoute> route(const RouteMaker& make,
                                                KvExchange* exchange) const override;
  void rewrite(StepPlan& plan) const override;
  bool decays(const layers::Parameter& p) const override;
};

}  // namespace driftless::train
