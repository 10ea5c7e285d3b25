// `driftless batch`: prints each rank's step plan as JSON: the forwards in order with the
// ModelInput of every sequence, and the backward order (train/step_plan.h, the plan the
// trainer walks: how a user sees what the model sees). Flags are named after the run-config
// keys they will read from `--config` (data.path, batch.sequence_length, ...). With `--export`
// it writes the global batches of a run's steps to a file instead (train/batch_export.h).
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/command.h"
#include "data/dataset.h"
#include "data/random_dataset.h"
#include "data/sampler.h"
#include "engine/core/error.h"
#include "train/batch_export.h"
#include "train/config.h"
#include "train/layout.h"
#include "train/step_plan.h"

namespace driftless::apps {
namespace {

struct BatchOptions {
  std::string dataset;  // data.path
  bool random = false;  // data.random
  data::RandomDatasetConfig random_config;
  std::string long_documents = "split";  // data.long_documents
  data::SamplerConfig sampler;
  int32_t micro_sequences = 1;   // schedule.micro_sequences
  int32_t depth_first = 1;       // schedule.depth_first
  int32_t breadth_first = 1;     // schedule.breadth_first
  int32_t sdp = 1;               // distributed.sequence_data_parallel
  int32_t cp = 1;                // distributed.context_parallel.size
  std::string cp_kind = "ring";  // distributed.context_parallel.kind
  int32_t cp_group = 1;          // distributed.context_parallel.group_size (hybrid)
  int32_t data_parallel = 1;     // distributed.data_parallel
  int64_t step = 0;
  int32_t rank = -1;  // -1: every rank
  std::string config;
  std::vector<std::string> overrides;  // --set key.path=value
  bool compact = false;
  std::string export_path;  // --export FILE: the run's batches instead of one step's plan
  train::BatchExport export_what;
};

int run_export(const BatchOptions& o) {
  DL_CHECK(!o.config.empty(), "batch",
           "expected --config with --export (the run's data and batch)");
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

// Fills the options a flag did not set from the run config (flags win over the file).
void apply_config(BatchOptions& o, const CLI::App& sub) {
  const train::Config c = train::load_config(o.config, o.overrides);
  auto unset = [&](const char* flag) { return sub.get_option(flag)->count() == 0; };
  if (unset("--dataset") && unset("--random")) {
    o.random = c.data.format == train::DataFormat::random;
    if (!o.random) o.dataset = c.data.path;
  }
  if (unset("--random-documents")) o.random_config.num_documents = c.data.random_documents;
  if (unset("--random-mean-length"))
    o.random_config.mean_length = double(c.data.random_mean_length);
  if (unset("--random-max-length")) o.random_config.max_length = int32_t(c.data.random_max_length);
  o.random_config.distribution = c.data.random_distribution;
  o.random_config.vocab_size = int32_t(c.model.vocab_size);
  if (unset("--long-documents")) o.long_documents = train::config_name(c.data.long_documents);
  if (unset("--pad-documents-to")) o.sampler.pad_documents_to = int32_t(c.data.pad_documents_to);
  o.sampler.shuffle = c.data.shuffle;
  if (unset("--seq-len")) o.sampler.sequence_length = c.batch.sequence_length;
  if (unset("--batch")) o.sampler.sequences = c.batch.sequences;
  if (unset("--micro-sequences")) o.micro_sequences = int32_t(c.schedule.micro_sequences);
  if (unset("--depth-first")) o.depth_first = int32_t(c.schedule.depth_first);
  if (unset("--breadth-first")) o.breadth_first = int32_t(c.schedule.breadth_first);
  if (unset("--sdp")) o.sdp = int32_t(c.distributed.sequence_data_parallel);
  if (unset("--context-parallel")) o.cp = int32_t(c.distributed.context_parallel.size);
  if (unset("--cp-kind")) o.cp_kind = train::config_name(c.distributed.context_parallel.kind);
  if (unset("--cp-group")) o.cp_group = int32_t(c.distributed.context_parallel.group_size);
  if (unset("--data-parallel")) o.data_parallel = int32_t(c.distributed.data_parallel);
  if (unset("--seed")) o.sampler.seed = uint64_t(c.training.seed);
}

int run_batch(const BatchOptions& o) {
  DL_CHECK(o.random != !o.dataset.empty(), "batch",
           "expected exactly one of --dataset PATH or --random");
  std::unique_ptr<data::Dataset> ds = o.random
                                          ? std::make_unique<data::RandomDataset>(o.random_config)
                                          : data::open_dataset(o.dataset);
  data::SamplerConfig sc = o.sampler;
  sc.long_documents = data::parse_long_documents(o.long_documents);
  DL_CHECK(o.sdp >= 1 && o.cp >= 1 && o.data_parallel >= 1 && o.micro_sequences >= 1 &&
               o.depth_first >= 1 && o.breadth_first >= 1,
           "batch",
           "expected --sdp, --context-parallel, --data-parallel, --micro-sequences, "
           "--depth-first and --breadth-first >= 1");
  DL_CHECK(o.sdp == 1 || o.cp == 1, "batch",
           "expected one of --sdp and --context-parallel, got " << o.sdp << " and " << o.cp);
  // The ranks sharing a sequence, and which slices each holds (train/layout.h).
  const int32_t P = o.sdp * o.cp, world = P * o.data_parallel;
  const train::ContextParallel kind = layers::context_parallel_kind(o.cp_kind, o.cp);
  DL_CHECK(kind != train::ContextParallel::hybrid || (o.cp_group >= 1 && o.cp % o.cp_group == 0),
           "batch",
           "expected --cp-group to divide --context-parallel (" << o.cp << "), got " << o.cp_group);
  DL_CHECK(sc.sequences % o.data_parallel == 0, "batch",
           "expected --data-parallel (" << o.data_parallel << ") to divide --batch, got "
                                        << sc.sequences);
  DL_CHECK(o.rank < world, "batch", "expected --rank in [0, " << world << "), got " << o.rank);
  data::Sampler sampler(*ds, sc);
  data::GlobalBatch batch = sampler.batch(o.step);
  const int64_t per_group = sc.sequences / o.data_parallel;

  nlohmann::json out;
  out["dataset"] = ds->describe();
  out["step"] = o.step;
  out["sequence_length"] = sc.sequence_length;
  out["sequences"] = sc.sequences;
  out["micro_sequences"] = o.micro_sequences;
  out["depth_first"] = o.depth_first;
  out["breadth_first"] = o.breadth_first;
  out["sequence_data_parallel"] = o.sdp;
  out["context_parallel"] = {{"size", o.cp}, {"kind", o.cp_kind}};
  if (kind == train::ContextParallel::hybrid) out["context_parallel"]["group_size"] = o.cp_group;
  out["data_parallel"] = o.data_parallel;
  out["loss_tokens"] = batch.loss_tokens;
  out["ranks"] = nlohmann::json::array();
  // Rank numbering is parallel/process_group.h's: the sdp ranks of a sequence are adjacent.
  for (int32_t rank = 0; rank < world; ++rank) {
    if (o.rank >= 0 && rank != o.rank) continue;
    train::Layout layout;
    layout.data_parallel = o.data_parallel;
    layout.sequence_data_parallel = o.sdp;
    layout.context_parallel = kind == train::ContextParallel::none ? 1 : o.cp;
    layout.cp_kind = kind;
    if (kind == train::ContextParallel::hybrid) layout.cp_group_size = o.cp_group;
    layout.depth_first = o.depth_first;
    layout.breadth_first = o.breadth_first;
    layout.micro_sequences = o.micro_sequences;
    layout.rank = rank;
    const int32_t group = int32_t(layout.data_rank());
    nlohmann::json r;
    r["rank"] = rank;
    r["sdp_rank"] = layout.sdp_rank();
    r["batch_data_rank"] = group;
    r["sequences"] = nlohmann::json::array();
    for (int64_t b = group * per_group; b < (group + 1) * per_group; ++b) {
      const data::PackedSequence& seq = batch.sequences[size_t(b)];
      nlohmann::json js;
      js["batch_sequence"] = b;  // index in the global batch, as the plan names it
      js["sequence"] = seq.index;
      js["epoch"] = seq.epoch;
      js["document_lengths"] = seq.document_lengths;
      js["source_documents"] = seq.source_documents;
      js["source_offsets"] = seq.source_offsets;
      r["sequences"].push_back(js);
    }
    train::PlanOptions po;
    po.pad_documents_to = sc.pad_documents_to;
    r["plan"] = train::to_json(train::plan_step(layout, batch, po));
    out["ranks"].push_back(r);
  }
  std::cout << out.dump(o.compact ? -1 : 1) << "\n";
  return 0;
}

Registrar reg(
    {"batch",
     "Print each rank's step plan (forwards with their ModelInputs, backward order) as JSON",
     [](CLI::App& sub) {
       auto o = std::make_shared<BatchOptions>();
       sub.add_option("--config", o->config, "Run config (YAML); flags override its keys");
       sub.add_option("--set", o->overrides, "Config override key.path=value");
       sub.add_option("--dataset", o->dataset,
                      "data.path: PREFIX of a .bin/.idx pair, an llm.c shard or a "
                      "folder of shards");
       sub.add_flag("--random", o->random, "data.format: random (seeded synthetic documents)");
       sub.add_option("--random-documents", o->random_config.num_documents)->capture_default_str();
       sub.add_option("--random-mean-length", o->random_config.mean_length)->capture_default_str();
       sub.add_option("--random-max-length", o->random_config.max_length)->capture_default_str();
       sub.add_option("--seq-len", o->sampler.sequence_length, "batch.sequence_length")
           ->capture_default_str();
       sub.add_option("--batch", o->sampler.sequences,
                      "batch.sequences: sequences per step (global)")
           ->capture_default_str();
       sub.add_option("--micro-sequences", o->micro_sequences, "schedule.micro_sequences")
           ->capture_default_str();
       sub.add_option("--depth-first", o->depth_first, "schedule.depth_first")
           ->capture_default_str();
       sub.add_option("--breadth-first", o->breadth_first, "schedule.breadth_first")
           ->capture_default_str();
       sub.add_option("--sdp", o->sdp, "distributed.sequence_data_parallel")->capture_default_str();
       sub.add_option("--context-parallel", o->cp,
                      "distributed.context_parallel.size (instead of --sdp): ranks sharing a "
                      "sequence by context parallelism")
           ->capture_default_str();
       sub.add_option("--cp-kind", o->cp_kind,
                      "distributed.context_parallel.kind: ring (a forward lists two inputs per "
                      "sequence, chunks r and 2P-1-r of 2P, sharing a slot), a2a (SDP's "
                      "contiguous chunk, with the whole micro-sequence) or hybrid (a2a in "
                      "groups of --cp-group, the ring across them: two pieces per sequence, "
                      "each with its ring chunk)")
           ->check(CLI::IsMember({"ring", "a2a", "hybrid"}))
           ->capture_default_str();
       sub.add_option("--cp-group", o->cp_group,
                      "distributed.context_parallel.group_size: ranks per all-to-all group of "
                      "the hybrid")
           ->capture_default_str();
       sub.add_option("--data-parallel", o->data_parallel,
                      "distributed.data_parallel: groups that split the sequences")
           ->capture_default_str();
       sub.add_option("--step", o->step, "Training step")->capture_default_str();
       sub.add_option("--rank", o->rank, "Only this rank (default: all)");
       sub.add_option("--seed", o->sampler.seed, "training.seed")->capture_default_str();
       sub.add_option("--pad-documents-to", o->sampler.pad_documents_to, "data.pad_documents_to")
           ->capture_default_str();
       sub.add_option("--long-documents", o->long_documents,
                      "data.long_documents: split or truncate")
           ->capture_default_str();
       sub.add_flag("--compact", o->compact, "One-line JSON");
       sub.add_option("--export", o->export_path,
                      "Write the global batches of --steps steps from --step (and "
                      "--validation-batches of validation) to FILE.safetensors instead of "
                      "printing a plan; needs --config");
       sub.add_option("--steps", o->export_what.steps, "With --export: how many steps")
           ->capture_default_str();
       sub.add_option("--validation-batches", o->export_what.validation_batches,
                      "With --export: validation batches, as training.eval_batches evaluates")
           ->capture_default_str();
       CLI::App* app = &sub;  // owned by the parent app, outlives the run
       return std::function<int()>([o, app] {
         if (!o->export_path.empty()) return run_export(*o);
         if (!o->config.empty()) apply_config(*o, *app);
         o->random_config.seed = o->sampler.seed;
         return run_batch(*o);
       });
     }});

}  // namespace
}  // namespace driftless::apps
