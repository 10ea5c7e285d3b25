// `driftless sample --checkpoint C --prompt "..."`: wiring only. Rebuilds the model from the
// config stored in the checkpoint, loads its weights and generates with the K/V buffers as the
// cache (layers/generate.h).
#include <filesystem>
#include <iostream>

#include "apps/command.h"
#include "data/tokenizer.h"
#include "engine/core/error.h"
#include "engine/train/checkpoint.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "layers/generate.h"

namespace driftless::apps {
namespace {

struct SampleArgs {
  std::string checkpoint;
  std::vector<std::string> prompts;
  int64_t tokens = 64;
  int64_t top_k = 40;
  double temperature = 1.0;
  uint64_t seed = 1;
  std::string vocab_dir;
};

int run_sample(const SampleArgs& a) {
  std::string path = a.checkpoint;
  if (std::filesystem::is_directory(path)) {  // a run directory: its newest checkpoint
    path = train::latest_checkpoint(a.checkpoint);
    DL_CHECK(!path.empty(), "sample", "no checkpoint in " << a.checkpoint << "/checkpoints");
  }
  const train::CheckpointInfo info = train::read_checkpoint_info(path);
  const train::Config config = train::parse_config_text(info.config_yaml);
  auto tokenizer = data::make_tokenizer(config.data.tokenizer, a.vocab_dir);
  DL_CHECK(tokenizer->vocab_size() <= config.model.vocab_size, "sample",
           "tokenizer '" << tokenizer->name() << "' has " << tokenizer->vocab_size()
                         << " tokens, more than the model's vocab_size "
                         << config.model.vocab_size);
  layers::Gpt model(config.model);
  train::load_checkpoint(path, model, nullptr);

  const std::vector<std::string> prompts =
      a.prompts.empty() ? std::vector<std::string>{""} : a.prompts;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> prompt = tokenizer->encode(prompts[i]);
    // An empty prompt starts a new document, as in training.
    if (prompt.empty()) prompt.push_back(tokenizer->end_of_text());
    const std::vector<int32_t> out = layers::generate(
        model, prompt, a.tokens, a.top_k, a.temperature, a.seed + i, tokenizer->end_of_text());
    std::cout << prompts[i] << tokenizer->decode(out) << "\n";
    if (prompts.size() > 1) std::cout << "--\n";
  }
  return 0;
}

Registrar reg({"sample",
               "Generate text from a checkpoint (greedy or top-k sampling, K/V buffers as the "
               "cache)",
               [](CLI::App& sub) {
                 auto args = std::make_shared<SampleArgs>();
                 sub.add_option("--checkpoint,-c", args->checkpoint,
                                "checkpoint file, or a run directory (its newest checkpoint)")
                     ->required()
                     ->check(CLI::ExistingPath);
                 sub.add_option("--prompt,-p", args->prompts,
                                "text to continue (repeatable; default: a new document)");
                 sub.add_option("--tokens,-n", args->tokens, "new tokens per prompt at most")
                     ->capture_default_str()
                     ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
                 sub.add_option("--top-k", args->top_k,
                                "sample among the k most likely tokens (1: greedy, 0: all)")
                     ->capture_default_str()
                     ->check(CLI::NonNegativeNumber);
                 sub.add_option("--temperature", args->temperature, "0: greedy")
                     ->capture_default_str()
                     ->check(CLI::NonNegativeNumber);
                 sub.add_option("--seed", args->seed, "sampling seed (prompt i uses seed + i)")
                     ->capture_default_str();
                 sub.add_option("--vocab-dir", args->vocab_dir,
                                "GPT-2 vocabulary folder (default: $DRIFTLESS_VOCAB_DIR or "
                                ".cache/gpt2-vocab)");
                 sub.footer("Generation stops at end-of-text or at the model's n_positions.");
                 return std::function<int()>([args] { return run_sample(*args); });
               }});

}  // namespace
}  // namespace driftless::apps
