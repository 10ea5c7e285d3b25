// `driftless bench memory`: peak activation memory of one training step for several
// micro-sequence counts (the point of micro-sequences is less memory). Wiring only; the
// measurement uses the allocator's in-use/peak counters around Trainer::train_step.
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "apps/command.h"
#include "engine/train/trainer.h"

namespace driftless::apps {
namespace {

struct BenchArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::vector<int64_t> micro_sequences = {1, 2, 4};
};

int run_memory(const BenchArgs& a) {
  std::cout << "micro_sequences  peak_activation_MiB  resident_before_MiB  step_seconds\n";
  nlohmann::json rows = nlohmann::json::array();
  double first = 0;
  for (int64_t m : a.micro_sequences) {
    auto overrides = a.overrides;
    overrides.push_back("schedule.micro_sequences=" + std::to_string(m));
    overrides.push_back("training.eval_interval=0");
    train::Config c = train::load_config(a.config, overrides);
    train::TrainerOptions o;
    o.progress = false;
    train::Trainer trainer(c, o);
    const Device dev = c.precision.device == "cuda" ? Device::cuda : Device::cpu;
    trainer.train_step(0);  // warm up: K/V buffers, optimizer state
    const size_t before = memory_stats(dev).bytes_in_use;
    reset_peak_memory(dev);
    const auto st = trainer.train_step(1);
    const double peak = double(memory_stats(dev).peak_bytes_in_use - before) / (1 << 20);
    if (first == 0) first = peak;
    std::cout << std::setw(15) << m << std::setw(21) << std::fixed << std::setprecision(1) << peak
              << std::setw(21) << double(before) / (1 << 20) << std::setw(14)
              << std::setprecision(3) << st.seconds << "   (" << std::setprecision(2)
              << peak / first << "x of m=" << a.micro_sequences[0] << ")\n";
    rows.push_back({{"micro_sequences", m}, {"peak_activation_bytes", peak * (1 << 20)},
                    {"resident_bytes", before}, {"step_seconds", st.seconds}});
  }
  std::cout << rows.dump() << "\n";
  return 0;
}

Registrar reg({"bench", "Benchmarks (memory: peak activation memory vs micro-sequences)",
               [](CLI::App& sub) {
                 auto a = std::make_shared<BenchArgs>();
                 auto* mem = sub.add_subcommand(
                     "memory", "peak activation memory of a training step for each m");
                 mem->add_option("--config,-c", a->config, "run config")->required();
                 mem->add_option("--set", a->overrides, "override a key (repeatable)");
                 mem->add_option("--micro-sequences,-m", a->micro_sequences,
                                 "micro-sequence counts to measure");
                 sub.require_subcommand(1);
                 return std::function<int()>([a] { return run_memory(*a); });
               }});

}  // namespace
}  // namespace driftless::apps
