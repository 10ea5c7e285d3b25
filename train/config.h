// The run configuration: every section of a
// YAML run config as a plain struct. The schema (names, types, ranges, allowed values, help)
// lives in one place, config_schema.cpp, and drives parsing, validation, dumping and the
// reference; options with a fixed set of values are enums, parsed and checked at load.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/sampler.h"
#include "engine/core/dtype.h"
#include "engine/optim/schedule.h"
#include "layers/attention/context_parallel.h"
#include "layers/attention/jit/kernel_cache.h"
#include "layers/gpt_config.h"
#include "layers/recompute.h"

namespace driftless::train {

using ModelConfig = layers::GptConfig;  // the model: section

enum class DataFormat { memmap, llmc, random };
// SDP K/V exchange: only the rows another rank reads, or whole chunks.
enum class KvExchangeMode { needed, full };

// The name a config writes for an enum value (data.format's "memmap", ...).
const std::string& config_name(DataFormat v);
const std::string& config_name(layers::Architecture v);
const std::string& config_name(data::LongDocuments v);
const std::string& config_name(optim::LrDecay v);
const std::string& config_name(layers::ContextParallel v);
const std::string& config_name(KvExchangeMode v);
const std::string& config_name(layers::Recompute v);

// The cache of run-time compiled attention kernels (layers/attention/jit/kernel_cache.h).
struct KernelCacheConfig {
  int64_t capacity = 64;  // loaded kernels held in memory
  std::string dir;        // "": default_cache_dir(); "off": memory only
};

struct AttentionConfig {
  KernelCacheConfig kernel_cache;
};

struct DataConfig {
  DataFormat format = DataFormat::random;
  std::string path;               // .bin/.idx prefix or shard file
  std::string validation_path;    // optional
  std::string tokenizer = "gpt2";  // gpt2 | bytes
  data::LongDocuments long_documents = data::LongDocuments::split;
  int64_t pad_documents_to = 0;
  bool shuffle = true;
  // random datasets
  int64_t random_documents = 1000;
  int64_t random_mean_length = 200;
  int64_t random_max_length = 2048;
  std::string random_distribution = "exponential";  // exponential | uniform | fixed
};

struct BatchConfig {
  int64_t sequence_length = 1024;
  int64_t sequences = 8;  // global batch, sequences per step
};

struct ScheduleConfig {
  int64_t micro_sequences = 1;
  int64_t breadth_first = 1;
  int64_t depth_first = 1;
};

struct OptimizerConfig {
  double lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 10;
  optim::LrDecay decay = optim::LrDecay::cosine;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0: off
};

struct TrainingConfig {
  int64_t steps = 100;
  int64_t eval_interval = 50;  // 0: off
  int64_t eval_batches = 4;
  int64_t checkpoint_interval = 0;  // 0: only at the end
  int64_t keep_checkpoints = 0;     // newest checkpoints kept; 0: all
  int64_t max_nonfinite_steps = 3;  // consecutive skipped (non-finite) steps that stop the run
  int64_t log_interval = 1;
  int64_t seed = 1234;
  bool deterministic = true;
  std::string init_from;  // checkpoint whose weights start the run ("": seeded init)
  layers::Recompute recompute = layers::Recompute::none;  // activations recomputed in backward
};

// Context parallelism (layers/attention/routes/: ring_route, all_to_all_route): size ranks
// share each sequence; ring passes K/V chunks around them (load-balanced causal split), a2a
// (Ulysses) trades tokens for heads with all-to-all.
struct ContextParallelConfig {
  int64_t size = 1;
  layers::ContextParallel kind = layers::ContextParallel::ring;  // ring | a2a | hybrid
  int64_t group_size = 1;  // hybrid: ranks per all-to-all group; the ring spans the groups
};

struct DistributedConfig {
  int64_t sequence_data_parallel = 1;
  ContextParallelConfig context_parallel;
  int64_t data_parallel = 1;
  int64_t zero_stage = 0;
  double bucket_mb = 100;  // gradient all-reduce buckets; 0: one reduction after the backward
  KvExchangeMode kv_exchange = KvExchangeMode::needed;
  double timeout_seconds = 600;
};

struct PrecisionConfig {
  Device device = Device::cpu;
  DType compute = DType::f32;    // f32 | bf16 (bf16 needs cuda)
  double peak_tflops = 0;        // for MFU; 0: from the GPU's name (H100/H200/A100)
};

struct TensorLogConfig {
  std::vector<int64_t> steps;  // steps at which tensors are logged
  std::vector<std::string> kinds = {"forward", "backward", "param_grad", "param"};
};

struct RunConfig {
  std::string output_dir = "runs/default";
  TensorLogConfig tensor_logs;
};

struct Config {
  ModelConfig model;
  AttentionConfig attention;
  DataConfig data;
  BatchConfig batch;
  ScheduleConfig schedule;
  OptimizerConfig optimizer;
  TrainingConfig training;
  DistributedConfig distributed;
  PrecisionConfig precision;
  RunConfig run;
};

// Reads a YAML file (with optional top-level `include:` of other files, merged first),
// applies `key.path=value` overrides, and validates strictly: every unknown key, wrong type
// and out-of-range value is reported with its YAML path, all in one driftless::Error.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Same from YAML text (include paths relative to base_dir).
Config parse_config_text(const std::string& yaml, const std::vector<std::string>& overrides = {},
                         const std::string& base_dir = ".");
// The effective config as YAML (every key, defaults included).
std::string config_to_yaml(const Config& config);
// Every key of the schema with its value as YAML text, in schema order ("model.n_layer",
// "12"): what ranks compare to agree on a run, and --resume compares to a checkpoint's.
std::vector<std::pair<std::string, std::string>> config_entries(const Config& config);
// A Markdown table of every key: path, type, default, allowed values, help.
std::string config_reference();
// The process kernel cache's options of attention.kernel_cache (its dir resolved: "" is
// default_cache_dir(), "off" none); every command that runs a model configures it with them.
layers::jit::KernelCacheOptions kernel_cache_options(const Config& config);

}  // namespace driftless::train
