// The planted faults (test_faults.h).
#include "train/test_faults.h"

#include <algorithm>
#include <memory>
#include <sstream>

#include "engine/core/error.h"

namespace driftless::train {

TestFaults TestFaults::parse(const std::string& list) {
  TestFaults f;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.rfind("layer=", 0) == 0)
      f.route_faults.layer = std::stoll(item.substr(6));
    else if (item == "cu_seqlens_k")
      f.route_faults.cu_seqlens_k_from_begin = true;
    else if (item == "drop_kv_grad")
      f.route_faults.drop_kv_grad_slice = true;
    else if (item == "skip_kv_reduce_scatter")
      f.route_faults.skip_kv_reduce_scatter = true;
    else if (item == "reverse_micro_sequences")
      f.reverse_micro_sequences = true;
    else if (item == "shift_positions")
      f.shift_positions = true;
    else if (item == "decay_norm_gains")
      f.decay_norm_gains = true;
    else
      DL_FAIL("train", "unknown DRIFTLESS_TEST_FAULT item '" << item << "'");
  }
  return f;
}

void TestFaults::check(const Layout& layout) const {
  DL_CHECK(layout.cp_kind == ContextParallel::none || !route_faults.any(), "train",
           "DRIFTLESS_TEST_FAULT cu_seqlens_k, drop_kv_grad and skip_kv_reduce_scatter live in "
           "the SDP K/V path; context parallelism has none of them (use sequence_data_parallel)");
}

std::unique_ptr<layers::AttentionRoute> TestFaults::route(const RouteMaker& make,
                                                          KvExchange* exchange) const {
  return std::make_unique<layers::FaultRoute>(route_faults, exchange,
                                              [&](KvExchange* ex) { return make(ex, true); });
}

void TestFaults::rewrite(StepPlan& plan) const {
  for (PlannedGroup& g : plan.groups) {
    if (reverse_micro_sequences) {
      // Each micro-batch's forwards last micro-sequence first; the backward order still
      // names the same forwards.
      std::vector<int64_t> order(g.forward.size());
      for (size_t n = 0; n < order.size(); ++n) order[n] = int64_t(n);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const PlannedForward &x = g.forward[size_t(a)], &y = g.forward[size_t(b)];
        return x.micro_batch != y.micro_batch ? x.micro_batch < y.micro_batch
                                              : x.micro_sequence > y.micro_sequence;
      });
      std::vector<PlannedForward> forward;
      std::vector<int64_t> moved_to(order.size());
      for (size_t n = 0; n < order.size(); ++n) {
        moved_to[size_t(order[n])] = int64_t(n);
        forward.push_back(std::move(g.forward[size_t(order[n])]));
      }
      g.forward = std::move(forward);
      for (int64_t& b : g.backward) b = moved_to[size_t(b)];
    }
    if (shift_positions)
      for (PlannedForward& f : g.forward)
        for (layers::PartInput& in : f.inputs)
          if (in.input->query_begin > 0) {
            auto shifted = std::make_shared<data::ModelInput>(*in.input);
            for (int32_t& p : shifted->position_index) ++p;
            in.input = std::move(shifted);
          }
  }
}

// A layer-norm or RMSNorm gain: the models' only one-dimensional ".weight" parameters.
bool TestFaults::decays(const layers::Parameter& p) const {
  const std::string suffix = ".weight";
  const bool norm_gain = p.value.dim() == 1 && p.name.size() >= suffix.size() &&
                         p.name.compare(p.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  return p.weight_decay || (decay_norm_gains && norm_gain);
}

}  // namespace driftless::train
