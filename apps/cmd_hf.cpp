// `driftless export --checkpoint C --hf DIR` and `driftless import --hf DIR --out C`: a
// checkpoint to and from a HuggingFace transformers GPT-2 or Llama directory (a run starts from
// an imported one with training.init_from). Wiring only; the conversions are layers/hf_*.h.
#include <filesystem>
#include <iostream>

#include "apps/command.h"
#include "data/tokenizer.h"
#include "layers/hf_gpt2.h"
#include "layers/hf_llama.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/trainer.h"

namespace driftless::apps {
namespace {

struct ExportOptions {
  std::string checkpoint;
  std::string hf_dir;
  int64_t max_shard_bytes = 0;
};

struct ImportOptions {
  std::string hf_dir;
  std::string out;
  std::string config;  // optional run config the checkpoint's config is based on
  std::vector<std::string> overrides;
};

// The end-of-text id of the run's tokenizer for config.json's bos/eos; -1 for GPT-2's (its
// vocabulary, 50257, implies 50256 without the files). A tokenizer.json is read for it.
int64_t end_of_text_of(const train::Config& config) {
  const std::string& t = config.data.tokenizer;
  if (t == "gpt2") return -1;
  if (t == "bytes" || t == "byte") return data::ByteTokenizer().end_of_text();
  try {
    return data::make_tokenizer(t)->end_of_text();
  } catch (const Error& e) {
    std::cerr << "warning: data.tokenizer " << t << " cannot be read (" << e.what()
              << "); bos/eos_token_id are written as null\n";
    return -1;
  }
}

int run_export(const ExportOptions& o) {
  std::string path = o.checkpoint;
  if (std::filesystem::is_directory(path)) {  // a run directory: its newest checkpoint
    path = train::latest_checkpoint(o.checkpoint);
    DL_CHECK(!path.empty(), "export", "no checkpoint in " << o.checkpoint << "/checkpoints");
  }
  const train::CheckpointInfo info = train::read_checkpoint_info(path);
  const train::Config config = train::parse_config_text(info.config_yaml);
  const layers::GptConfig g = config.model;
  // Refuses what the HF class cannot express before any work.
  if (g.is_llama())
    layers::hf_llama_config(g);
  else
    layers::hf_gpt2_config(g);
  layers::Gpt model(g);
  train::load_checkpoint(path, model, nullptr);
  const int64_t eot = end_of_text_of(config);
  const char* hf_class = g.is_llama() ? "LlamaForCausalLM" : "GPT2LMHeadModel";
  if (g.is_llama())
    layers::save_hf_llama(model, o.hf_dir, eot, o.max_shard_bytes);
  else
    layers::save_hf_gpt2(model, o.hf_dir, eot, o.max_shard_bytes);
  std::cout << "exported " << path << " (step " << info.step << ", " << model.num_parameters()
            << " parameters) to " << o.hf_dir << " as " << hf_class << "\n  load with transformers."
            << hf_class << ".from_pretrained(\"" << o.hf_dir
            << "\"); note our positions restart at every document start: pass position_ids "
               "for packed inputs\n";
  return 0;
}

int run_import(const ImportOptions& o) {
  const nlohmann::json hf_config = layers::read_hf_config("import", o.hf_dir);
  const std::string type = hf_config.value("model_type", std::string("gpt2"));
  DL_CHECK(
      type == "gpt2" || type == "llama", "import",
      o.hf_dir << "/config.json: model_type \"" << type << "\" is not supported (gpt2 or llama)");
  layers::HfModel hf =
      type == "llama" ? layers::load_hf_llama(o.hf_dir) : layers::load_hf_gpt2(o.hf_dir);
  train::Config config = o.config.empty() ? train::parse_config_text("", o.overrides)
                                          : train::load_config(o.config, o.overrides);
  train::ModelConfig& m = config.model;
  const double dropout = m.dropout;
  m = hf.config;
  if (!o.config.empty()) m.dropout = dropout;  // the run config's dropout wins
  // What config.json gave must pass the run config's own checks now, not when a later
  // `sample` or `train` reads the checkpoint.
  train::parse_config_text(train::config_to_yaml(config));
  layers::Gpt model(m);
  layers::load_into(hf, model);
  train::CheckpointInfo info;
  info.step = 0;
  info.config_yaml = train::config_to_yaml(config);
  // Absolute: save_checkpoint creates the parent folder, and a bare file name has none.
  train::save_checkpoint(std::filesystem::absolute(o.out).string(), model, nullptr, info);
  std::cout << "imported " << o.hf_dir << " (" << type << ", " << m.n_layer << " layers, n_embd "
            << m.n_embd << ", vocab " << m.vocab_size << ", " << model.num_parameters()
            << " parameters) to " << o.out << " (step 0, no optimizer state)\n"
            << "  train from it: driftless train -c RUN --set training.init_from=" << o.out;
  if (m.is_llama())
    std::cout << " --set model.architecture=llama --set model.intermediate_size="
              << m.intermediate_size << " --set model.rms_norm_eps=" << m.rms_norm_eps
              << " --set model.rope_theta=" << m.rope_theta
              << " --set model.tie_word_embeddings=" << (m.tie_word_embeddings ? "true" : "false");
  std::cout << " --set model.vocab_size=" << m.vocab_size
            << " --set model.n_positions=" << m.n_positions << " --set model.n_layer=" << m.n_layer
            << " --set model.n_head=" << m.n_head << " --set model.n_kv_head=" << m.n_kv_head
            << " --set model.n_embd=" << m.n_embd << "\n";
  return 0;
}

Registrar export_reg({"export",
                      "Write a checkpoint as a HuggingFace transformers directory "
                      "(GPT2LMHeadModel or LlamaForCausalLM, by model.architecture)",
                      [](CLI::App& sub) {
                        auto o = std::make_shared<ExportOptions>();
                        sub.add_option("--checkpoint", o->checkpoint,
                                       "driftless checkpoint (.safetensors), or a run "
                                       "directory (its newest checkpoint)")
                            ->required()
                            ->check(CLI::ExistingPath);
                        sub.add_option("--hf", o->hf_dir,
                                       "output directory (config.json, model.safetensors)")
                            ->required();
                        sub.add_option("--max-shard-bytes", o->max_shard_bytes,
                                       "split the weights into shards of at most this many bytes "
                                       "with model.safetensors.index.json (0: one file)")
                            ->check(CLI::NonNegativeNumber);
                        return std::function<int()>([o] { return run_export(*o); });
                      }});

Registrar import_reg(
    {"import",
     "Make a checkpoint from a HuggingFace transformers directory (config.json model_type gpt2: "
     "GPT2LMHeadModel, llama: LlamaForCausalLM)",
     [](CLI::App& sub) {
       auto o = std::make_shared<ImportOptions>();
       sub.add_option("--hf", o->hf_dir,
                      "directory as save_pretrained writes it: config.json and model.safetensors "
                      "(or model.safetensors.index.json and its shards)")
           ->required()
           ->check(CLI::ExistingDirectory);
       sub.add_option("--out", o->out, "checkpoint to write (.safetensors)")->required();
       sub.add_option("--config", o->config,
                      "run config stored in the checkpoint (its model section is replaced by "
                      "the HF model's); default: built-in defaults")
           ->check(CLI::ExistingFile);
       sub.add_option("--set", o->overrides, "config override key.path=value (repeatable)");
       sub.footer(
           "Start a run from the checkpoint with training.init_from (its model section must "
           "match); `driftless sample -c CHECKPOINT` samples from it directly.");
       return std::function<int()>([o] { return run_import(*o); });
     }});

}  // namespace
}  // namespace driftless::apps
