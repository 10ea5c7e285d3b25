// Checkpoints: one safetensors file holding the model ("model.<parameter name>"), the
// optimizer state ("optim.m", "optim.v" over the flat slab) and, in its metadata, the step,
// the optimizer's step count and the effective config (YAML). The sampler and every RNG are
// pure functions of (seed, step), so the step is the whole data and RNG state. Written to a
// temporary name and renamed: a killed run never leaves a broken checkpoint.
#pragma once
#include <string>

#include "engine/optim/adamw.h"
#include "layers/gpt.h"

namespace driftless::train {

constexpr const char* kCheckpointFormat = "driftless-checkpoint-1";

struct CheckpointInfo {
  int64_t step = 0;  // last completed step
  std::string config_yaml;
};

std::string checkpoint_path(const std::string& run_dir, int64_t step);
// The newest checkpoint of a run directory, or "" when there is none.
std::string latest_checkpoint(const std::string& run_dir);

// Optimizer state as stored: moments over slab elements [begin, end).
struct OptimizerSnapshot {
  Tensor m, v;
  int64_t step = 0;
  int64_t begin = 0, end = 0;
  static OptimizerSnapshot of(const optim::AdamW& opt);
};

void save_checkpoint(const std::string& path, const layers::Gpt& model,
                     const OptimizerSnapshot* optimizer, const CheckpointInfo& info);
// Reads only the metadata (step, config).
CheckpointInfo read_checkpoint_info(const std::string& path);
// Loads parameters (and optimizer state when given) into existing objects; shapes must match.
// The stored moments must cover the optimizer's shard (a ZeRO-1 rank takes its slice).
CheckpointInfo load_checkpoint(const std::string& path, layers::Gpt& model,
                               optim::AdamW* optimizer);

// training.init_from: starts a run from the weights of `path` (another run's checkpoint, or
// `driftless import --hf`'s), without its step or optimizer state. The checkpoint's model
// section must equal `model`'s config (dropout aside); the error lists the differing keys
// as --set flags.
void init_from_checkpoint(const std::string& path, layers::Gpt& model);

}  // namespace driftless::train
