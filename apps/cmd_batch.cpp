// `driftless batch --config C [--set k=v ...]`: prints each rank's step plan as JSON: the
// forwards in order with the ModelInput of every sequence, and the backward order
// (train/step_plan.h, the plan the trainer walks: how a user sees what the model sees). The
// data, batch, schedule and layout come from the run config, as `driftless train` reads it
// (train::Layout::from_config). With `--export` it writes the global batches of a run's steps
// to a file instead (train/batch_export.h).
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/command.h"
#include "engine/core/error.h"
#include "train/batch_export.h"
#include "train/config.h"
#include "train/layout.h"
#include "train/step_plan.h"
#include "train/trainer.h"

namespace driftless::apps {
namespace {

struct BatchOptions {
  std::string config;
  std::vector<std::string> overrides;  // --set key.path=value
  int64_t step = 0;
  int32_t rank = -1;  // -1: every rank
  bool compact = false;
  std::string export_path;  // --export FILE: the run's batches instead of one step's plan
  train::BatchExport export_what;
};

int run_export(const BatchOptions& o) {
  const train::Config c = train::load_config(o.config, o.overrides);
  train::BatchExport what = o.export_what;
  what.first_step = o.step;
  train::export_batches(c, what, o.export_path);
  std::cout << "batch: steps " << what.first_step << " .. " << what.first_step + what.steps - 1
            << " (" << c.batch.sequences << " x " << c.batch.sequence_length << " tokens each)";
  if (what.validation_batches > 0)
    std::cout << " and " << what.validation_batches << " validation batches";
  std::cout << " written to " << o.export_path << "\n";
  return 0;
}

int run_batch(const BatchOptions& o) {
  const train::Config c = train::load_config(o.config, o.overrides);
  const train::Layout whole = train::Layout::from_config(c, 0);
  const int64_t world = whole.world_size();
  DL_CHECK(o.rank < world, "batch", "expected --rank in [0, " << world << "), got " << o.rank);
  train::micro_batches(whole, c.batch.sequences);  // validates the split before any work
  const std::unique_ptr<data::Dataset> ds = train::open_training_data(c, false);
  DL_CHECK(ds, "batch", "expected data.path or data.format random in " << o.config);
  data::Sampler sampler(*ds, train::sampler_config(c));
  const data::GlobalBatch batch = sampler.batch(o.step);
  const int64_t per_group = c.batch.sequences / whole.data_parallel;

  nlohmann::json out;
  out["dataset"] = ds->describe();
  out["step"] = o.step;
  out["sequence_length"] = c.batch.sequence_length;
  out["sequences"] = c.batch.sequences;
  out["micro_sequences"] = whole.micro_sequences;
  out["depth_first"] = whole.depth_first;
  out["breadth_first"] = whole.breadth_first;
  out["sequence_data_parallel"] = whole.sequence_data_parallel;
  out["context_parallel"] = {{"size", whole.context_parallel},
                             {"kind", train::config_name(c.distributed.context_parallel.kind)}};
  if (whole.cp_kind == train::ContextParallel::hybrid)
    out["context_parallel"]["group_size"] = whole.cp_group_size;
  out["data_parallel"] = whole.data_parallel;
  out["loss_tokens"] = batch.loss_tokens;
  out["ranks"] = nlohmann::json::array();
  // Rank numbering is parallel/process_group.h's: the ranks sharing a sequence are adjacent.
  for (int64_t rank = 0; rank < world; ++rank) {
    if (o.rank >= 0 && rank != o.rank) continue;
    const train::Layout layout = train::Layout::from_config(c, rank);
    const int64_t group = layout.data_rank();
    nlohmann::json r;
    r["rank"] = rank;
    r["sdp_rank"] = layout.sdp_rank();
    r["batch_data_rank"] = group;
    r["sequences"] = nlohmann::json::array();
    for (int64_t b = group * per_group; b < (group + 1) * per_group; ++b) {
      const data::PackedSequence& seq = batch.sequences[size_t(b)];
      nlohmann::json js;
      js["global_sequence"] = b;  // index in the global batch, as the plan names it
      js["sequence"] = seq.index;
      js["epoch"] = seq.epoch;
      js["document_lengths"] = seq.document_lengths;
      js["source_documents"] = seq.source_documents;
      js["source_offsets"] = seq.source_offsets;
      r["sequences"].push_back(js);
    }
    train::PlanOptions po;
    po.pad_documents_to = int32_t(c.data.pad_documents_to);
    r["plan"] = train::to_json(train::plan_step(layout, batch, po));
    out["ranks"].push_back(r);
  }
  std::cout << out.dump(o.compact ? -1 : 1) << "\n";
  return 0;
}

Registrar reg({"batch",
               "Print each rank's step plan (forwards with their ModelInputs, backward order) "
               "as JSON, for the data, batch and layout of a run config",
               [](CLI::App& sub) {
                 auto o = std::make_shared<BatchOptions>();
                 sub.add_option("-c,--config", o->config, "Run config (YAML)")->required();
                 sub.add_option("--set", o->overrides,
                                "Config override key.path=value (repeatable), as for train: "
                                "e.g. --set schedule.micro_sequences=4 --set "
                                "distributed.context_parallel.size=2");
                 sub.add_option("--step", o->step, "Training step")->capture_default_str();
                 sub.add_option("--rank", o->rank, "Only this rank (default: all)");
                 sub.add_flag("--compact", o->compact, "One-line JSON");
                 sub.add_option("--export", o->export_path,
                                "Write the global batches of --steps steps from --step (and "
                                "--validation-batches of validation) to FILE.safetensors "
                                "instead of printing a plan");
                 sub.add_option("--steps", o->export_what.steps, "With --export: how many steps")
                     ->capture_default_str();
                 sub.add_option("--validation-batches", o->export_what.validation_batches,
                                "With --export: validation batches, as training.eval_batches "
                                "evaluates")
                     ->capture_default_str();
                 return std::function<int()>(
                     [o] { return o->export_path.empty() ? run_batch(*o) : run_export(*o); });
               }});

}  // namespace
}  // namespace driftless::apps
