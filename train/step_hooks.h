// What a caller may change of the trainer's run from outside it (the planted faults of the
// regression tests, train/test_faults.h): the attention route the trainer builds, the plan of
// every step, and the optimizer's weight-decay groups. The trainer applies them without knowing
// what they do.
#pragma once
#include <functional>
#include <memory>

#include "engine/core/kv_exchange.h"
#include "layers/attention/routes/route.h"
#include "layers/parameters.h"
#include "train/layout.h"
#include "train/step_plan.h"

namespace driftless::train {

// Builds the layout's route over an exchange; keep_buffers: with K/V buffers even where the
// layout needs none (attention_route's).
using RouteMaker =
    std::function<std::unique_ptr<layers::AttentionRoute>(KvExchange*, bool keep_buffers)>;

class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // Refuses (driftless::Error) a layout the hooks cannot act on.
  virtual void check(const Layout& layout) const { (void)layout; }
  // The route the trainer uses, from `make` over the exchange of the ranks sharing a sequence.
  virtual std::unique_ptr<layers::AttentionRoute> route(const RouteMaker& make,
                                                        KvExchange* exchange) const {
    return make(exchange, false);
  }
  // Rewrites a training step's plan before the trainer walks it.
  virtual void rewrite(StepPlan& plan) const { (void)plan; }
  // Whether AdamW decays a parameter (its weight-decay group).
  virtual bool decays(const layers::Parameter& p) const { return p.weight_decay; }
};

}  // namespace driftless::train
