// The step plan: the forward and backward order of one training step as data
// (ARCHITECTURE.md "Data flow of one training step"). plan_step cuts this rank's share of
// the global batch by the layout (depth-first groups of breadth-first micro-batches,
// micro-sequences, the slices of the ranks sharing a sequence), or into the whole sequences
// of an evaluation; Trainer::train_step and Trainer::evaluate walk it and `driftless batch`
// prints it.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "data/model_input.h"
#include "data/sampler.h"
#include "layers/attention/routes/route.h"
#include "train/layout.h"

namespace driftless::train {

// One forward of the model: micro-sequence `micro_sequence` of micro-batch `micro_batch`.
struct PlannedForward {
  int64_t micro_batch = 0;  // within its depth-first group
  int64_t micro_sequence = 0;
  // The slice in the model's order: one entry per sequence (the ring: two, chunks r and
  // 2P-1-r, sharing a slot), each its ModelInput on this rank, its K/V slot within the
  // depth-first group, its index in the global batch and what a2a and the hybrid attend.
  std::vector<layers::PartInput> inputs;
};

// A depth-first group: the K/V gradient buffers start from zero, then every forward in
// order, then the backwards of their losses in `backward` order.
struct PlannedGroup {
  std::vector<PlannedForward> forward;
  std::vector<int64_t> backward;  // indices into forward
};

struct StepPlan {
  std::vector<PlannedGroup> groups;
  // Several forwards run before their backwards (micro-sequences or breadth-first
  // micro-batches): the loss recomputes its logits in the backward instead of holding a dW
  // per forward (ForwardOptions::recompute_loss).
  bool recompute_loss = false;
};

struct PlanOptions {
  int32_t pad_documents_to = 0;  // data.pad_documents_to
  // An evaluation: whole sequences, one forward each and no backward, on the first rank of
  // each sequence's ranks (the others get an empty plan); the local route, no K/V buffer.
  bool evaluation = false;
};

// This rank's (layout.rank) plan of the step of `batch`. Backward: micro-batches and
// micro-sequences in reverse order, so a micro-sequence's K/V gradient slice is complete
// (every later micro-sequence has added to it) when its backward runs.
StepPlan plan_step(const Layout& layout, const data::GlobalBatch& batch,
                   const PlanOptions& options = {});

nlohmann::json to_json(const StepPlan& plan);

}  // namespace driftless::train
