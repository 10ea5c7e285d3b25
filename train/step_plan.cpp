// The step plan (step_plan.h).
#include "train/step_plan.h"

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

namespace driftless::train {

namespace {

StepPlan plan_evaluation(const Layout& layout, const data::GlobalBatch& batch, int32_t pad) {
  StepPlan plan;
  if (layout.sdp_rank() != 0) return plan;  // whole sequences, one rank per sequence
  Layout whole = layout;
  whole.micro_sequences = 1;
  whole.depth_first = whole.breadth_first = 1;
  PlannedGroup& g = plan.groups.emplace_back();
  const auto groups = micro_batches(whole, int64_t(batch.sequences.size()));
  for (int64_t s : groups[0][0]) {
    PlannedForward f;
    f.inputs.push_back({std::make_shared<const data::ModelInput>(
                            data::make_model_input(batch.sequences[size_t(s)], {0, 1, 0, 1}, pad)),
                        0, s, nullptr});
    g.forward.push_back(std::move(f));
  }
  return plan;
}

}  // namespace

StepPlan plan_step(const Layout& layout, const data::GlobalBatch& batch,
                   const PlanOptions& options) {
  if (options.evaluation) return plan_evaluation(layout, batch, options.pad_documents_to);
  const int64_t m = layout.micro_sequences;
  const int32_t pad = options.pad_documents_to;
  StepPlan plan;
  plan.recompute_loss = layout.micro_sequences > 1 || layout.breadth_first > 1;
  for (const auto& group : micro_batches(layout, int64_t(batch.sequences.size()))) {
    PlannedGroup& g = plan.groups.emplace_back();
    // forward index of (micro-batch, micro-sequence)
    std::vector<std::vector<int64_t>> index(group.size(), std::vector<int64_t>(size_t(m)));
    int64_t slot = 0;
    for (size_t mb = 0; mb < group.size(); ++mb) {
      for (int64_t i = 0; i < m; ++i) {
        PlannedForward f;
        f.micro_batch = int64_t(mb);
        f.micro_sequence = i;
        for (size_t j = 0; j < group[mb].size(); ++j) {
          const int64_t s = group[mb][j];
          const data::PackedSequence& seq = batch.sequences[size_t(s)];
          const int32_t at = int32_t(layout.sdp_rank()), P = int32_t(layout.sequence_ranks()),
                        G = int32_t(layout.cp_group_size);
          auto mine = rank_inputs(seq, int32_t(i), int32_t(m), at, P, layout.cp_kind, pad, G);
          auto whole = attended_inputs(seq, int32_t(i), int32_t(m), at, P, layout.cp_kind, pad, G);
          for (size_t k = 0; k < mine.size(); ++k) {
            std::shared_ptr<const data::ModelInput> w;
            if (!whole.empty())
              w = std::make_shared<const data::ModelInput>(whole[std::min(k, whole.size() - 1)]);
            f.inputs.push_back({std::make_shared<const data::ModelInput>(std::move(mine[k])),
                                slot + int64_t(j), s, std::move(w)});
          }
        }
        index[mb][size_t(i)] = int64_t(g.forward.size());
        g.forward.push_back(std::move(f));
      }
      slot += int64_t(group[mb].size());
    }
    for (size_t mb = group.size(); mb-- > 0;)
      for (int64_t i = m; i-- > 0;) g.backward.push_back(index[mb][size_t(i)]);
  }
  return plan;
}

nlohmann::json to_json(const StepPlan& plan) {
  nlohmann::json groups = nlohmann::json::array();
  for (const PlannedGroup& g : plan.groups) {
    nlohmann::json forward = nlohmann::json::array();
    for (const PlannedForward& f : g.forward) {
      nlohmann::json inputs = nlohmann::json::array();
      for (const layers::PartInput& p : f.inputs) {
        nlohmann::json in = {{"global_sequence", p.global_sequence},
                             {"slot", p.slot},
                             {"input", data::to_json(*p.input)}};
        if (p.whole) in["whole"] = data::to_json(*p.whole);
        inputs.push_back(in);
      }
      forward.push_back({{"micro_batch", f.micro_batch},
                         {"micro_sequence", f.micro_sequence},
                         {"inputs", inputs}});
    }
    groups.push_back({{"forward", forward}, {"backward", g.backward}});
  }
  return {{"depth_first_groups", groups}, {"recompute_loss", plan.recompute_loss}};
}

}  // namespace driftless::train
