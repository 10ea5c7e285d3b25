// `driftless sample --checkpoint C --prompt "..."`: wiring only. Rebuilds the model from the
// config stored in the checkpoint, loads its weights and generates with the K/V buffers as the
// cache (layers/generate.h); `--ids` and `--logits` serve checks against other frameworks.
#include <climits>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "apps/command.h"
#include "data/tokenizer.h"
#include "engine/core/error.h"
#include "engine/core/safetensors.h"
#include "layers/attention/jit/kernel_cache.h"
#include "layers/generate.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/trainer.h"

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
  std::string tokenizer;  // overrides the checkpoint's data.tokenizer
  bool ids = false;       // prompts and output are token ids
  std::string logits;     // write the prompts' packed logits here instead of generating
};

// "15 7 0" or "15,7,0" -> {15, 7, 0}.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::string s = text;
  for (char& ch : s)
    if (ch == ',') ch = ' ';
  std::istringstream in(s);
  std::vector<int32_t> out;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    DL_CHECK(used == word.size() && v >= 0 && v <= INT32_MAX, "sample",
             "--ids: expected token ids separated by spaces or commas, got '" << word << "' in '"
                                                                              << text << "'");
    out.push_back(int32_t(v));
  }
  return out;
}

int run_sample(const SampleArgs& a) {
  std::string path = a.checkpoint;
  if (std::filesystem::is_directory(path)) {  // a run directory: its newest checkpoint
    path = train::latest_checkpoint(a.checkpoint);
    DL_CHECK(!path.empty(), "sample", "no checkpoint in " << a.checkpoint << "/checkpoints");
  }
  const train::CheckpointInfo info = train::read_checkpoint_info(path);
  const train::Config config = train::parse_config_text(info.config_yaml);
  layers::jit::configure_process_kernel_cache(train::kernel_cache_options(config));
  // Token ids need no tokenizer (nor GPT-2's vocabulary files).
  std::unique_ptr<data::Tokenizer> tokenizer;
  if (!a.ids) {
    tokenizer = data::make_tokenizer(a.tokenizer.empty() ? config.data.tokenizer : a.tokenizer,
                                     a.vocab_dir);
    DL_CHECK(tokenizer->vocab_size() <= config.model.vocab_size, "sample",
             "tokenizer '" << tokenizer->name() << "' has " << tokenizer->vocab_size()
                           << " tokens, more than the model's vocab_size "
                           << config.model.vocab_size);
  }
  const std::vector<std::string> prompts =
      a.prompts.empty() ? std::vector<std::string>{""} : a.prompts;
  std::vector<std::vector<int32_t>> encoded;
  for (const auto& p : prompts) {
    std::vector<int32_t> t = a.ids ? parse_ids(p) : tokenizer->encode(p);
    // An empty prompt starts a new document, as in training.
    if (t.empty()) {
      DL_CHECK(!a.ids, "sample", "--ids: a prompt holds no token id");
      t.push_back(tokenizer->end_of_text());
    }
    encoded.push_back(std::move(t));
  }
  layers::Gpt model(config.model);
  train::load_checkpoint(path, model, nullptr);

  if (!a.logits.empty()) {
    std::vector<int32_t> flat, lengths;
    for (const auto& t : encoded) {
      flat.insert(flat.end(), t.begin(), t.end());
      lengths.push_back(int32_t(t.size()));
    }
    const Tensor logits = layers::packed_logits(model, encoded);
    write_safetensors(a.logits,
                      {{"logits", logits},
                       {"tokens", Tensor::from_vector(flat)},
                       {"document_lengths", Tensor::from_vector(lengths)}},
                      {{"checkpoint", path}});
    std::cout << "wrote the logits (" << logits.size(0) << ", " << logits.size(1) << ") of "
              << encoded.size() << " packed documents to " << a.logits << "\n";
    return 0;
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    // Token ids are not tied to a tokenizer: no end-of-text stop, exactly -n tokens (or
    // until n_positions).
    const int32_t stop = a.ids ? -1 : tokenizer->end_of_text();
    const std::vector<int32_t> out =
        layers::generate(model, encoded[i], a.tokens, a.top_k, a.temperature, a.seed + i, stop);
    if (a.ids) {
      std::string line;
      for (int32_t t : encoded[i]) line += std::to_string(t) + " ";
      for (int32_t t : out) line += std::to_string(t) + " ";
      line.pop_back();
      std::cout << line << "\n";
    } else {
      std::cout << prompts[i] << tokenizer->decode(out) << "\n";
      if (prompts.size() > 1) std::cout << "--\n";
    }
  }
  return 0;
}

Registrar reg(
    {"sample",
     "Generate text from a checkpoint (greedy or top-k sampling, K/V buffers as the cache)",
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
       sub.add_option("--tokenizer", args->tokenizer,
                      "gpt2, bytes, or a HuggingFace tokenizer.json (default: the checkpoint's "
                      "data.tokenizer); its vocabulary must fit the model's vocab_size");
       sub.add_flag("--ids", args->ids,
                    "prompts are token ids (\"15 7 0\" or \"15,7,0\"); prints each prompt's ids "
                    "and the new ones on one line; no tokenizer, no end-of-text stop");
       sub.add_option("--logits", args->logits,
                      "instead of generating, write to this .safetensors the logits (T, V) of "
                      "the prompts packed into one sequence as training packs documents "
                      "(positions restart, attention stays within each prompt), with "
                      "`tokens` (T) and `document_lengths`");
       sub.footer(
           "Generation stops at end-of-text (not with --ids) or at the model's n_positions.");
       return std::function<int()>([args] { return run_sample(*args); });
     }});

}  // namespace
}  // namespace driftless::apps
