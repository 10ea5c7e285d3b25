// Checkpoints: one safetensors file holding the model ("model.<parameter name>"), the
// optimizer state ("optim.m", "optim.v" over the flat slab) and, in its metadata, the step,
// the optimizer's step count and the effective config (YAML). The sampler and every RNG are
// pure functions of (seed, step), so the step is the whole data and RNG state. Written to a
// temporary name and renamed: a killed run never leaves a broken checkpoint. Each tensor's
// checksum is stored too, so a file damaged later is found before it is trained on.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/optim/adamw.h"
#include "layers/gpt.h"

namespace driftless::train {

constexpr const char* kCheckpointFormat = "driftless-checkpoint-1";

struct CheckpointInfo {
  int64_t step = 0;  // last completed step
  std::string config_yaml;
};

std::string checkpoint_path(const std::string& run_dir, int64_t step);
// The checkpoints (step_<N>.safetensors, regular files) of a run directory, newest first;
// a name whose step does not fit in 63 bits, a directory or a FIFO so named is ignored.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir);
// The newest checkpoint of a run directory, or "" when there is none.
std::string latest_checkpoint(const std::string& run_dir);
// training.keep_checkpoints: removes all but the newest `keep` checkpoints (0 keeps all).
void prune_checkpoints(const std::string& run_dir, int64_t keep);

// Optimizer state as stored: moments over slab elements [begin, end).
struct OptimizerSnapshot {
  Tensor m, v;
  int64_t step = 0;
  int64_t begin = 0, end = 0;
  static OptimizerSnapshot of(const optim::AdamW& opt);
};

// Refuses (driftless::Error naming the parameter) weights that are not all finite.
void save_checkpoint(const std::string& path, const layers::Gpt& model,
                     const OptimizerSnapshot* optimizer, const CheckpointInfo& info);
// Reads only the metadata (step, config).
CheckpointInfo read_checkpoint_info(const std::string& path);
// Reads the whole file: it must be a driftless checkpoint whose tensors match their stored
// checksums (files written before checksums have none to match) and hold finite values.
// Throws driftless::Error naming the file and the first tensor that fails.
void verify_checkpoint(const std::string& path);
// Which of save_checkpoint's refusals a model's weights meet: the first parameter holding a
// NaN or an infinity, or "" when every one is finite.
std::string first_non_finite_parameter(const layers::Gpt& model);
// Loads parameters (and optimizer state when given) into existing objects; shapes must match,
// and the file must pass verify_checkpoint's checks.
// The stored moments must cover the optimizer's shard (a ZeRO-1 rank takes its slice).
CheckpointInfo load_checkpoint(const std::string& path, layers::Gpt& model,
                               optim::AdamW* optimizer);

// training.init_from: starts a run from the weights of `path` (another run's checkpoint, or
// `driftless import --hf`'s), without its step or optimizer state. The checkpoint's model
// section must equal `model`'s config (dropout aside); the error lists the differing keys
// as --set flags.
void init_from_checkpoint(const std::string& path, layers::Gpt& model);

}  // namespace driftless::train
