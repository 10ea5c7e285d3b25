// The small random-data run the trainer's tests train (a 2-layer GQA model on random
// documents, 10 steps), with a trainer log kept in memory; and error_of, the message of
// the driftless::Error a call throws.
#pragma once
#include <atomic>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "tests/error_of.h"
#include "train/config.h"
#include "train/trainer.h"

namespace driftless::train::tiny_run {

// Random documents (exponential lengths, some longer than a sequence), GQA, 2 layers.
inline const char* kBase = R"(
model: {vocab_size: 61, n_positions: 64, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32}
data: {format: random, random_documents: 200, random_mean_length: 12, random_max_length: 48}
batch: {sequence_length: 32, sequences: 4}
optimizer: {lr: 1.0e-2, min_lr: 1.0e-3, warmup_steps: 2}
training: {steps: 10, eval_interval: 5, eval_batches: 1, seed: 7, deterministic: true}
)";

inline Config make_config(const std::string& dir, std::vector<std::string> overrides = {}) {
  overrides.push_back("run.output_dir=" + dir);
  return parse_config_text(kBase, overrides);
}

struct Quiet {
  std::ostringstream log;
  TrainerOptions options(const std::atomic<int>* stop = nullptr, bool resume = false) {
    TrainerOptions o;
    o.progress = false;
    o.log = &log;
    o.stop = stop;
    o.resume = resume;
    return o;
  }
};

// The message of the driftless::Error f throws, or "no error".
inline std::string error_of(const std::function<void()>& f) {
  return testing::error_of(f, "no error");
}

}  // namespace driftless::train::tiny_run
