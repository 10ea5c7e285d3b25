// `driftless export --checkpoint C --hf DIR` and `driftless import --hf DIR --out C`: a
// checkpoint to and from a HuggingFace transformers GPT-2 directory (a run starts from
// an imported one with training.init_from). Wiring only; the conversion is layers/hf_gpt2.h.
#include <filesystem>
#include <iostream>

#include "apps/command.h"
#include "data/tokenizer.h"
#include "layers/hf_gpt2.h"
#include "train/checkpoint.h"
#include "train/config.h"
#include "train/trainer.h"

namespace driftless::apps {
namespace {

struct ExportOptions {
  std::string checkpoint;
  std::string hf_dir;
};

struct ImportOptions {
  std::string hf_dir;
  std::string out;
  std::string config;  // optional run config the checkpoint's config is based on
  std::vector<std::string> overrides;
};

int run_export(const ExportOptions& o) {
  const train::CheckpointInfo info = train::read_checkpoint_info(o.checkpoint);
  const train::Config config = train::parse_config_text(info.config_yaml);
  const layers::GptConfig g = config.model;
  layers::hf_gpt2_config(g);  // refuses GQA, softcap, ALiBi before any work
  layers::Gpt model(g);
  train::load_checkpoint(o.checkpoint, model, nullptr);
  // The byte tokenizer's end-of-text is known without files; -1 lets GPT-2's vocabulary
  // (50257) imply 50256.
  const int64_t eot = config.data.tokenizer == "gpt2" ? -1 : data::ByteTokenizer().end_of_text();
  layers::save_hf_gpt2(model, o.hf_dir, eot);
  std::cout << "exported " << o.checkpoint << " (step " << info.step << ", "
            << model.num_parameters() << " parameters) to " << o.hf_dir
            << "/{config.json,model.safetensors}\n"
            << "  load with transformers.GPT2LMHeadModel.from_pretrained(\"" << o.hf_dir
            << "\"); note our positions restart at every document start: pass position_ids "
               "for packed inputs\n";
  return 0;
}

int run_import(const ImportOptions& o) {
  layers::HfGpt2 hf = layers::load_hf_gpt2(o.hf_dir);
  train::Config config = o.config.empty() ? train::parse_config_text("", o.overrides)
                                          : train::load_config(o.config, o.overrides);
  train::ModelConfig& m = config.model;
  m.vocab_size = hf.config.vocab_size;
  m.n_positions = hf.config.n_positions;
  m.n_layer = hf.config.n_layer;
  m.n_head = hf.config.n_head;
  m.n_kv_head = 0;
  m.n_embd = hf.config.n_embd;
  m.softcap = 0;
  m.alibi = false;
  if (o.config.empty()) m.dropout = hf.config.dropout;  // else the run config's dropout wins
  layers::Gpt model(m);
  layers::load_into(hf, model);
  train::CheckpointInfo info;
  info.step = 0;
  info.config_yaml = train::config_to_yaml(config);
  // Absolute: save_checkpoint creates the parent folder, and a bare file name has none.
  train::save_checkpoint(std::filesystem::absolute(o.out).string(), model, nullptr, info);
  std::cout << "imported " << o.hf_dir << " (" << m.n_layer << " layers, n_embd " << m.n_embd
            << ", vocab " << m.vocab_size << ", " << model.num_parameters() << " parameters) to "
            << o.out << " (step 0, no optimizer state)\n"
            << "  train from it: driftless train -c RUN --set training.init_from=" << o.out
            << " --set model.vocab_size=" << m.vocab_size
            << " --set model.n_positions=" << m.n_positions << " --set model.n_layer=" << m.n_layer
            << " --set model.n_head=" << m.n_head
            << " --set model.n_kv_head=0 --set model.n_embd=" << m.n_embd << "\n";
  return 0;
}

Registrar export_reg({"export", "Write a checkpoint as a HuggingFace transformers GPT-2 directory",
                      [](CLI::App& sub) {
                        auto o = std::make_shared<ExportOptions>();
                        sub.add_option("--checkpoint", o->checkpoint,
                                       "driftless checkpoint (.safetensors)")
                            ->required()
                            ->check(CLI::ExistingFile);
                        sub.add_option("--hf", o->hf_dir,
                                       "output directory (config.json, model.safetensors)")
                            ->required();
                        return std::function<int()>([o] { return run_export(*o); });
                      }});

Registrar import_reg(
    {"import", "Make a checkpoint from a HuggingFace transformers GPT-2 directory",
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
