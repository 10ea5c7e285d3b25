// `driftless bench train --config C [--set k=v] [--steps N] [--warmup W]`: tokens/s, MFU,
// peak memory per GPU (median of the timed steps after warm-up) and the GPUs' energy a step
// (NVML's counter), on one process or under mpirun with any layout. Benchmark defaults
// (random packed documents, cuda, bf16, 16 x 1024 tokens, no validation) apply on top of C, so
// a model config such as configs/models/gpt2_124m.yaml is enough; --set applies last. The
// last line is JSON, which tests/reference/bench_gpt2.py reads to print the ratios against
// PyTorch.
#include "apps/bench_train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "apps/distributed_run.h"
#include "engine/core/device_ops.h"
#include "train/flops.h"

namespace driftless::apps {
namespace {

struct BenchTrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  int64_t steps = 10, warmup = 3;
};

const std::vector<std::string> kDefaults = {
    "data.format=random",          "data.random_documents=20000", "data.random_mean_length=512",
    "data.random_max_length=1024", "precision.device=cuda",       "precision.compute=bf16",
    "batch.sequence_length=1024",  "batch.sequences=16",          "training.eval_interval=0",
    "optimizer.warmup_steps=2",    "run.output_dir=runs/bench_train"};

int run_bench_train(const BenchTrainArgs& a) {
  std::vector<std::string> overrides = kDefaults;
  overrides.push_back("training.steps=" + std::to_string(a.warmup + a.steps));
  overrides.insert(overrides.end(), a.overrides.begin(), a.overrides.end());
  const train::Config c = train::load_config(a.config, overrides);
  return run_distributed(c, [&](train::TrainerOptions& o) {
    o.progress = false;
    train::Trainer t(c, o);
    const Device dev = c.precision.device;
    const bool root = o.rank == 0;
    for (int64_t s = 0; s < a.warmup; ++s) t.train_step(s);
    reset_peak_memory(dev);
    // This rank's GPU energy over the timed steps (each step ends synced: no queue spills
    // over); NaN on cpu or without the counter.
    std::string energy_why = "a cpu run";
    const auto energy = [&] {
      return dev == Device::cuda ? cuda::energy_joules(&energy_why)
                                 : std::numeric_limits<double>::quiet_NaN();
    };
    const double joules0 = energy();
    const auto timed0 = std::chrono::steady_clock::now();
    std::vector<double> secs, flop_rates;  // random documents: FLOPs differ per step
    std::vector<double> prepare, issue;    // host time of each step (StepStats)
    double flops = 0;
    int64_t tokens = 0;
    for (int64_t s = a.warmup; s < a.warmup + a.steps; ++s) {
      const train::StepStats st = t.train_step(s);  // ends with the loss on the host: synced
      secs.push_back(st.seconds);
      prepare.push_back(st.prepare_seconds);
      issue.push_back(st.issue_seconds);
      flop_rates.push_back(st.flops / st.seconds);
      flops = st.flops;
      tokens = st.tokens;
      if (root)
        std::cerr << "  step " << s << ": " << std::fixed << std::setprecision(1)
                  << st.seconds * 1e3 << " ms, loss " << std::setprecision(4) << st.loss << "\n";
    }
    const double joules = energy() - joules0;
    const double timed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - timed0).count();
    std::sort(secs.begin(), secs.end());
    std::sort(prepare.begin(), prepare.end());
    std::sort(issue.begin(), issue.end());
    std::sort(flop_rates.begin(), flop_rates.end());
    const double median = secs[secs.size() / 2];
    const double median_rate = flop_rates[flop_rates.size() / 2];
    // A value of every rank: each writes its slot, a sum gathers them (NaN anywhere stays).
    const int64_t world = t.layout().world_size();
    const auto gather = [&](double mine) {
      Tensor all = Tensor::zeros({world}, DType::f64, dev);
      all.narrow(0, o.rank, 1).copy_(Tensor::full({1}, mine, DType::f64, dev));
      if (world > 1) o.data_group->all_reduce(all);
      return all.to(Device::cpu).to_vector<double>();
    };
    const std::vector<double> peak = gather(double(memory_stats(dev).peak_bytes_in_use));
    double step_joules = 0;  // every rank's GPU, a step (NaN: not measured)
    for (double j : gather(joules)) step_joules += j / double(a.steps);
    const double peak_max = *std::max_element(peak.begin(), peak.end());
    double peak_flops = c.precision.peak_tflops * 1e12;
    if (peak_flops == 0 && dev == Device::cuda)
      peak_flops = train::cuda_peak_flops(c.precision.compute);
    const double tps = double(tokens) / median;
    const double mfu = peak_flops > 0 ? median_rate / (peak_flops * double(world)) : 0;
    if (root) {
      std::cout << "bench train: " << t.model().num_parameters() << " parameters, "
                << t.layout().describe() << ", " << c.batch.sequences << " x "
                << c.batch.sequence_length << " tokens, " << dtype_name(c.precision.compute)
                << " on " << (dev == Device::cuda ? cuda::device_name() : std::string("cpu"))
                << "\n"
                << "  median step " << std::fixed << std::setprecision(1) << median * 1e3
                << " ms over " << a.steps << " steps: " << std::setprecision(0) << tps
                << " tokens/s";
      if (mfu > 0) std::cout << ", MFU " << std::setprecision(1) << 100 * mfu << "%";
      std::cout << ", peak memory " << std::setprecision(2) << peak_max / double(1 << 30)
                << " GiB per GPU (max over ranks)\n"
                << "  host (median): " << std::setprecision(1) << prepare[prepare.size() / 2] * 1e3
                << " ms making the batch and plan, " << issue[issue.size() / 2] * 1e3
                << " ms issuing the forwards and backwards\n";
      if (std::isnan(step_joules))
        std::cout << "  energy: not measured (" << energy_why << ")\n";
      else
        std::cout << "  energy: " << std::setprecision(2) << step_joules << " J a step on " << world
                  << " GPU(s), " << std::setprecision(0)
                  << step_joules * double(a.steps) / timed_s / double(world)
                  << " W a GPU on average, " << std::setprecision(0) << double(tokens) / step_joules
                  << " tokens/J (over " << std::setprecision(1) << timed_s
                  << " s; under a power cap the speed follows the energy)\n";
      std::cout << nlohmann::json{{"parameters", t.model().num_parameters()},
                                  {"layout", t.layout().describe()},
                                  {"world", world},
                                  {"sequences", c.batch.sequences},
                                  {"sequence_length", c.batch.sequence_length},
                                  {"compute", dtype_name(c.precision.compute)},
                                  {"median_step_s", median},
                                  {"median_prepare_s", prepare[prepare.size() / 2]},
                                  {"median_issue_s", issue[issue.size() / 2]},
                                  {"tokens_per_s", tps},
                                  {"flops_last_step", flops},
                                  {"mfu", mfu},
                                  {"joules_per_step", json_number(step_joules)},
                                  {"tokens_per_joule", json_number(double(tokens) / step_joules)},
                                  {"peak_bytes_per_rank", peak}}
                       .dump()
                << "\n";
    }
    return 0;
  });
}

}  // namespace

CLI::App* add_bench_train(CLI::App& bench, std::function<int()>* run) {
  auto a = std::make_shared<BenchTrainArgs>();
  auto* sub = bench.add_subcommand(
      "train",
      "training tokens/s, MFU, peak memory per GPU (median of timed steps after warm-up) and "
      "the GPUs' energy a step and tokens per joule (run under mpirun for several ranks)");
  sub->add_option("--config,-c", a->config, "model or run config (YAML)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--set", a->overrides, "override a key, applied last (repeatable)");
  sub->add_option("--steps", a->steps, "timed steps (the median is reported)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--warmup", a->warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  sub->footer(
      "Defaults on top of the config: random packed documents (mean 512, max 1024 tokens), "
      "precision.device cuda, precision.compute bf16, batch 16 x 1024, no validation.");
  *run = [a] { return run_bench_train(*a); };
  return sub;
}

}  // namespace driftless::apps
