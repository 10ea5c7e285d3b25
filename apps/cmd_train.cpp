// `driftless train --config C [--set k=v ...] [--resume]`: wiring of the trainer, with
// Ctrl-C finishing the step, writing a checkpoint and exiting (status 130).
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "apps/command.h"
#include "apps/distributed_run.h"

namespace driftless::apps {
namespace {

std::atomic<bool> g_stop{false};

void on_sigint(int) {
  if (g_stop.exchange(true)) std::_Exit(130);  // second Ctrl-C: leave now
}

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  bool resume = false;
  bool quiet = false;
};

// Test-only fault injection (regression must catch these): DRIFTLESS_TEST_FAULT is a
// comma list of layer=N, cu_seqlens_k, drop_kv_grad, skip_kv_reduce_scatter,
// reverse_micro_sequences.
layers::ModelFaults faults_from_env() {
  layers::ModelFaults f;
  const char* env = std::getenv("DRIFTLESS_TEST_FAULT");
  if (!env) return f;
  std::stringstream ss(env);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.rfind("layer=", 0) == 0)
      f.layer = std::stoll(item.substr(6));
    else if (item == "cu_seqlens_k")
      f.cu_seqlens_k_from_begin = true;
    else if (item == "drop_kv_grad")
      f.drop_kv_grad_slice = true;
    else if (item == "skip_kv_reduce_scatter")
      f.skip_kv_reduce_scatter = true;
    else if (item == "reverse_micro_sequences")
      f.reverse_micro_sequences = true;
    else
      DL_FAIL("train", "unknown DRIFTLESS_TEST_FAULT item '" << item << "'");
  }
  std::cerr << "driftless: TEST FAULT INJECTED (" << env << ")\n";
  return f;
}

int run_train(const TrainArgs& a) {
  const train::Config config = train::load_config(a.config, a.overrides);
  return run_distributed(config, [&](train::TrainerOptions& options) {
    options.resume = a.resume;
    options.stop = &g_stop;
    options.progress = !a.quiet;
    const layers::ModelFaults faults = faults_from_env();
    options.faults = &faults;
    std::signal(SIGINT, on_sigint);
    train::Trainer trainer(config, options);
    return trainer.run();
  });
}

Registrar reg({"train",
               "Train a GPT-2 model from a YAML config (progress, validation, metrics.jsonl, "
               "checkpoints in run.output_dir)",
               [](CLI::App& sub) {
                 auto args = std::make_shared<TrainArgs>();
                 sub.add_option("--config,-c", args->config, "run config (YAML)")
                     ->required()
                     ->check(CLI::ExistingFile);
                 sub.add_option("--set", args->overrides,
                                "override a config key, e.g. --set model.n_layer=4 (repeatable)");
                 sub.add_flag("--resume", args->resume,
                              "continue from the newest checkpoint in run.output_dir");
                 sub.add_flag("--quiet,-q", args->quiet, "no progress display");
                 sub.footer(
                     "Ctrl-C finishes the current step, writes a checkpoint and exits with "
                     "status 130; `--resume` continues bit for bit.");
                 return std::function<int()>([args] { return run_train(*args); });
               }});

}  // namespace
}  // namespace driftless::apps
