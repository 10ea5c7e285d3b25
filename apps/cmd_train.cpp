// `driftless train --config C [--set k=v ...] [--resume | --overwrite]`: wiring of the
// trainer. SIGINT or SIGTERM, to the launcher or to any one rank, finishes the step on every
// rank, writes one checkpoint and exits with 128 + the signal (docs/guarantees.md).
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>

#include "apps/command.h"
#include "apps/distributed_run.h"
#include "engine/core/env.h"

namespace driftless::apps {
namespace {

std::atomic<int> g_stop{0};

// Sets the flag the trainer reads at each step boundary. A second SIGINT (Ctrl-C twice)
// leaves at once; SIGTERM never does, because mpirun sends it after the tty's SIGINT.
void on_signal(int sig) {
  int none = 0;
  if (!g_stop.compare_exchange_strong(none, sig) && sig == SIGINT) std::_Exit(128 + SIGINT);
}

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  bool resume = false;
  bool overwrite = false;
  std::vector<std::string> allow_changes;
  bool quiet = false;
};

// Test-only fault injection (regression must catch these): DRIFTLESS_TEST_FAULT is a
// comma list of layer=N, cu_seqlens_k, drop_kv_grad, skip_kv_reduce_scatter,
// reverse_micro_sequences, shift_positions, decay_norm_gains. Unset: none (the trainer builds no
// fault route).
std::optional<layers::TestFaults> faults_from_env() {
  const std::string env = env_value("DRIFTLESS_TEST_FAULT");
  if (env.empty()) return std::nullopt;
  layers::TestFaults f;
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
    else if (item == "shift_positions")
      f.shift_positions = true;
    else if (item == "decay_norm_gains")
      f.decay_norm_gains = true;
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
    options.overwrite = a.overwrite;
    options.allow_changes = a.allow_changes;
    options.stop = &g_stop;
    options.progress = !a.quiet;
    const std::optional<layers::TestFaults> faults = faults_from_env();
    options.faults = faults ? &*faults : nullptr;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
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
                 auto* resume =
                     sub.add_flag("--resume", args->resume,
                                  "continue from the newest intact checkpoint in run.output_dir");
                 sub.add_flag("--overwrite", args->overwrite,
                              "start over in a run.output_dir that holds a run: delete its "
                              "metrics, checkpoints and tensor logs first")
                     ->excludes(resume);
                 sub.add_option("--allow-change", args->allow_changes,
                                "with --resume: accept a changed config key although the run "
                                "then no longer continues bit for bit (repeatable)")
                     ->needs(resume);
                 sub.add_flag("--quiet,-q", args->quiet, "no progress display");
                 sub.footer(
                     "Ctrl-C (SIGINT) or SIGTERM, to mpirun or to any one rank, finishes "
                     "the current step on every rank, writes one checkpoint and exits with "
                     "status 130 (143 for SIGTERM); `--resume` continues bit for bit. Under "
                     "mpirun, give the ranks time to write it: mpirun --mca "
                     "odls_base_sigkill_timeout 60.");
                 return std::function<int()>([args] { return run_train(*args); });
               }});

}  // namespace
}  // namespace driftless::apps
