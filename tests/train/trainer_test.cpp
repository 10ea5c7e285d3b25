// The trainer on small random-data configs: resume is bit for bit (with dropout too),
// evaluation is the token mean of the validation loss, the loss falls on data a tiny model
// can learn, every batch layout gives the gradients of `simple` (ARCHITECTURE.md "Data
// flow": rms_rel <= 1e-5), Ctrl-C stops after the step with a checkpoint, metrics lines carry
// the kernel cache's counters once it is used, and a bad layout is an error before any work.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/autograd/autograd.h"
#include "engine/core/error.h"
#include "layers/attention/jit/kernel_cache.h"
#include "tests/test_paths.h"
#include "tests/train/tiny_run.h"
#include "train/checkpoint.h"

namespace driftless::train {
namespace {

namespace fs = std::filesystem;

using tiny_run::make_config;
using tiny_run::Quiet;

// Every metrics.jsonl line, as JSON.
std::vector<nlohmann::json> metrics(const std::string& dir) {
  std::ifstream f(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// (step, "loss" | "val_loss") -> value, in file order.
std::vector<std::tuple<int64_t, std::string, double>> losses(const std::string& dir) {
  std::vector<std::tuple<int64_t, std::string, double>> out;
  for (const auto& j : metrics(dir))
    for (const char* key : {"loss", "val_loss"})
      if (j.contains(key)) out.emplace_back(j["step"].get<int64_t>(), key, j[key].get<double>());
  return out;
}

uint64_t bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

double rms_rel(const std::vector<float>& t, const std::vector<float>& r) {
  double d = 0, s = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    d += (double(t[i]) - r[i]) * (double(t[i]) - r[i]);
    s += double(r[i]) * r[i];
  }
  return std::sqrt(d / r.size()) / std::sqrt(s / r.size() + 1e-30);
}

// 10 straight steps against 5 steps, a checkpoint, and a new trainer that resumes for 5 more:
// every loss, validation loss and parameter is the same bit for bit.
void expect_resume_bit_for_bit(const std::vector<std::string>& overrides) {
  const std::string root = testing::scratch_dir();
  Quiet q;
  // 10 straight steps.
  Trainer straight(make_config(root + "/straight", overrides), q.options());
  ASSERT_EQ(straight.run(), 0);
  const std::vector<float> straight_params = straight.model().slab().params().to_vector<float>();

  // 5 steps (same 10-step schedule), checkpoint, a new process-like trainer resumes, 5 more.
  const std::string split = root + "/split";
  std::vector<double> first_losses;
  {
    Trainer first(make_config(split, overrides), q.options());
    for (int64_t s = 0; s < 5; ++s) first_losses.push_back(first.train_step(s).loss);
    first.save(4);
  }
  Trainer resumed(make_config(split, overrides), q.options(nullptr, /*resume=*/true));
  EXPECT_EQ(resumed.next_step(), 5);
  ASSERT_EQ(resumed.run(), 0);
  const auto ref = losses(root + "/straight");
  ASSERT_EQ(ref.size(), 12u);  // 10 losses + 2 validation losses
  std::vector<std::tuple<int64_t, std::string, double>> got;
  for (int64_t s = 0; s < 5; ++s) got.emplace_back(s, "loss", first_losses[size_t(s)]);
  for (const auto& l : losses(split)) got.push_back(l);
  ASSERT_EQ(got.size(), 11u);  // the split run had no validation at step 4
  size_t r = 0;
  for (const auto& [step, key, value] : got) {
    while (std::get<1>(ref[r]) == "val_loss" && key == "loss") ++r;  // skip ref's step-4 eval
    EXPECT_EQ(std::get<0>(ref[r]), step);
    EXPECT_EQ(std::get<1>(ref[r]), key);
    EXPECT_EQ(bits(std::get<2>(ref[r])), bits(value))
        << key << " at step " << step << ": " << std::get<2>(ref[r]) << " vs " << value;
    ++r;
  }
  const std::vector<float> resumed_params = resumed.model().slab().params().to_vector<float>();
  ASSERT_EQ(resumed_params.size(), straight_params.size());
  EXPECT_EQ(std::memcmp(resumed_params.data(), straight_params.data(),
                        straight_params.size() * sizeof(float)),
            0)
      << "parameters after 5 + resume + 5 steps differ from 10 straight steps";
  // The checkpoints written at the end agree too (the file is what a later resume reads).
  layers::Gpt a(straight.config().model), b(straight.config().model);
  load_checkpoint(latest_checkpoint(root + "/straight"), a, nullptr);
  load_checkpoint(latest_checkpoint(split), b, nullptr);
  EXPECT_EQ(a.slab().params().to_vector<float>(), b.slab().params().to_vector<float>());
}

TEST(Trainer, ResumeIsBitForBit) {
  expect_resume_bit_for_bit({});
}

// The dropout masks of a step come from (seed, step) alone, so a resumed run draws those of
// the steps it runs, not those of the first steps again.
TEST(Trainer, ResumeWithDropoutIsBitForBit) {
  expect_resume_bit_for_bit({"model.dropout=0.1"});
  // Dropout does change the loss here, far above rounding (~1e-7), so the comparison above
  // covers the masks.
  Quiet q;
  const std::string root = testing::scratch_dir();
  Trainer with(make_config(root + "/with", {"model.dropout=0.1"}), q.options());
  Trainer without(make_config(root + "/without"), q.options());
  const double a = with.train_step(0).loss, b = without.train_step(0).loss;
  EXPECT_GT(std::abs(a - b), 1e-4 * b) << "dropout 0.1 left the loss at " << a;
}

TEST(Trainer, EvaluateIsTheTokenMeanLossOfTheValidationBatches) {
  // Four small validation batches (2 sequences of 16 tokens) with unequal loss-token counts
  // and losses: a mean of per-batch or per-sequence means, a batch left out or one counted
  // twice all give another number.
  Config c = make_config(testing::scratch_dir(), {"training.eval_batches=4", "batch.sequences=2",
                                                  "batch.sequence_length=16"});
  Quiet q;
  Trainer t(c, q.options());
  t.train_step(0);  // weights that are not the initialisation's
  const double got = t.evaluate();

  auto data = open_training_data(c, /*validation=*/true);
  ASSERT_TRUE(data);
  data::Sampler sampler(*data, sampler_config(c));
  autograd::NoGradGuard no_grad;
  double sum = 0;
  int64_t tokens = 0;
  std::vector<int64_t> per_batch;
  for (int64_t k = 0; k < 4; ++k) {
    const data::GlobalBatch batch = sampler.batch(k);
    per_batch.push_back(batch.loss_tokens);
    for (size_t s = 0; s < batch.sequences.size(); ++s) {
      const data::PackedSequence& seq = batch.sequences[s];
      const data::ModelInput in = data::make_model_input(seq, {0, 1, 0, 1}, 0);
      layers::ForwardOptions fo;
      fo.training = false;  // whole sequences: the local route
      const Tensor logits = t.model().logits(
          {{std::make_shared<const data::ModelInput>(in), 0, int64_t(s)}}, fo);  // (S, V)
      const int64_t V = logits.size(1);
      const std::vector<float> l = logits.to_vector<float>();
      for (size_t i = 0; i < seq.labels.size(); ++i) {
        if (seq.labels[i] < 0) continue;
        const float* row = l.data() + i * size_t(V);
        double mx = row[0], z = 0;
        for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
        for (int64_t v = 0; v < V; ++v) z += std::exp(double(row[v]) - mx);
        sum += mx + std::log(z) - double(row[seq.labels[i]]);
        ++tokens;
      }
    }
  }
  ASSERT_NE(*std::min_element(per_batch.begin(), per_batch.end()),
            *std::max_element(per_batch.begin(), per_batch.end()));
  const double want = sum / double(tokens);
  std::cout << "evaluate() " << got << ", token mean " << want << ": rel "
            << std::abs(got - want) / want << "\n";
  // Both sum fp32 per-token losses in double: measured 3.6e-9 apart. 1e-6, not the fp32 op
  // tolerance 1e-5: this model's per-token losses are all near ln(61), so a mean of per-batch
  // means is only ~1e-5 from the token mean.
  EXPECT_NEAR(got, want, 1e-6 * want) << "evaluate() " << got << ", token mean " << want;
}

TEST(Trainer, LossFallsOnLearnableData) {
  // Four fixed documents of 15 tokens (+ end-of-text) repeated over and over: a tiny model
  // can memorise them, so the loss must fall far below the uniform-guess ln(61) = 4.1.
  const std::string dir = testing::scratch_dir();
  Config c = make_config(
      dir, {"data.random_documents=4", "data.random_distribution=fixed",
            "data.random_mean_length=16", "training.steps=30", "training.eval_interval=0",
            "optimizer.lr=2.0e-2", "optimizer.min_lr=2.0e-3"});
  Quiet q;
  Trainer t(c, q.options());
  ASSERT_EQ(t.run(), 0);
  const auto l = losses(dir);
  ASSERT_EQ(l.size(), 30u);
  const double first = std::get<2>(l.front());
  double last5 = 0;
  for (size_t i = 25; i < 30; ++i) last5 += std::get<2>(l[i]) / 5;
  EXPECT_NEAR(first, std::log(61.0), 0.2) << "an untrained model guesses uniformly";
  EXPECT_LT(last5, 0.5 * first) << "first loss " << first << ", mean of the last 5 " << last5;
}

TEST(Trainer, LayoutsGiveTheGradientsOfSimple) {
  const std::string root = testing::scratch_dir();
  // grad_clip 0: compare raw gradients, not ones rescaled by a (slightly different) norm.
  auto grads_of = [&](const std::string& name, std::vector<std::string> overrides) {
    overrides.push_back("optimizer.grad_clip=0");
    Quiet q;
    Trainer t(make_config(root + "/" + name, overrides), q.options());
    const StepStats st = t.train_step(0);
    return std::make_pair(t.model().slab().grads().to_vector<float>(), st.loss);
  };
  const auto [simple, simple_loss] = grads_of("simple", {});
  double norm = 0;
  for (float g : simple) norm += double(g) * g;
  ASSERT_GT(norm, 0);
  const std::vector<std::pair<std::string, std::vector<std::string>>> layouts = {
      {"ms2", {"schedule.micro_sequences=2"}},
      {"ms4", {"schedule.micro_sequences=4"}},
      {"df2", {"schedule.depth_first=2"}},
      {"bf2", {"schedule.breadth_first=2"}},
      {"df2_bf2_ms4",
       {"schedule.depth_first=2", "schedule.breadth_first=2", "schedule.micro_sequences=4"}},
  };
  for (const auto& [name, overrides] : layouts) {
    const auto [g, loss] = grads_of(name, overrides);
    ASSERT_EQ(g.size(), simple.size()) << name;
    const double err = rms_rel(g, simple);
    EXPECT_LE(err, 1e-5) << name;
    EXPECT_NEAR(loss, simple_loss, 1e-6 * simple_loss) << name;
  }
  // The comparison can fail: another batch's gradients are far from these.
  Quiet q;
  Trainer other(make_config(root + "/other", {"optimizer.grad_clip=0"}), q.options());
  other.train_step(1);
  EXPECT_GT(rms_rel(other.model().slab().grads().to_vector<float>(), simple), 0.1);
}

TEST(Trainer, StopFlagEndsAfterOneStepWithACheckpoint) {
  const std::string dir = testing::scratch_dir();
  std::atomic<int> stop{SIGINT};
  Quiet q;
  {
    Trainer t(make_config(dir), q.options(&stop));
    EXPECT_EQ(t.run(), 128 + SIGINT);
    EXPECT_EQ(t.next_step(), 1);
  }
  EXPECT_EQ(latest_checkpoint(dir), checkpoint_path(dir, 0));
  EXPECT_EQ(read_checkpoint_info(checkpoint_path(dir, 0)).step, 0);
  EXPECT_EQ(losses(dir).size(), 1u);
  // The message names the signal and the file that was written.
  EXPECT_NE(q.log.str().find("interrupted by SIGINT: checkpoint written at step 0 (" +
                             checkpoint_path(dir, 0) + "); continue with --resume"),
            std::string::npos)
      << q.log.str();
  // Stopped again right after resuming: one more step each time.
  stop = SIGTERM;
  {
    Trainer t(make_config(dir), q.options(&stop, true));
    EXPECT_EQ(t.run(), 128 + SIGTERM);
  }
  EXPECT_NE(q.log.str().find("interrupted by SIGTERM: checkpoint written at step 1"),
            std::string::npos);
  EXPECT_EQ(latest_checkpoint(dir), checkpoint_path(dir, 1));
  EXPECT_EQ(losses(dir).size(), 2u);
}

// The first metrics.jsonl line of a 2-step run into a fresh scratch directory.
nlohmann::json first_metrics_line(const std::string& dir) {
  Quiet q;
  Trainer t(make_config(dir, {"training.steps=2", "training.eval_interval=0"}), q.options());
  EXPECT_EQ(t.run(), 0);
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  std::getline(in, line);
  return nlohmann::json::parse(line);
}

TEST(Trainer, MetricsCarryTheKernelCacheCountersOnceItIsUsed) {
  layers::jit::configure_process_kernel_cache({4, ""});
  const nlohmann::json unused = first_metrics_line(testing::scratch_dir() + "/unused");
  EXPECT_FALSE(unused.contains("kernel_cache_misses")) << unused.dump();
  auto& cache = layers::jit::process_kernel_cache();
  const auto load = [](const std::string& b) -> layers::jit::Loaded {
    return std::make_shared<std::string>(b);
  };
  cache.get("kernel", [] { return std::string("bin"); }, load);
  cache.get("kernel", [] { return std::string("bin"); }, load);
  const nlohmann::json used = first_metrics_line(testing::scratch_dir() + "/used");
  EXPECT_EQ(used.value("kernel_cache_hits", -1), 1) << used.dump();
  EXPECT_EQ(used.value("kernel_cache_misses", -1), 1);
  EXPECT_EQ(used.value("kernel_cache_compiles", -1), 1);
  EXPECT_EQ(used.value("kernel_cache_disk_hits", -1), 0);
  EXPECT_EQ(used.value("kernel_cache_evictions", -1), 0);
  EXPECT_TRUE(used.contains("loss") && used.contains("step_seconds"));  // the usual keys remain
  layers::jit::configure_process_kernel_cache({64, ""});  // no counters for later tests
}

TEST(Trainer, BadLayoutIsAnErrorBeforeAnyWork) {
  const std::string root = testing::scratch_dir();
  Quiet q;
  auto error_of = [&](const std::string& dir, std::vector<std::string> overrides) {
    try {
      Trainer t(make_config(dir, overrides), q.options());
      t.run();
    } catch (const Error& e) {
      EXPECT_FALSE(fs::exists(dir)) << "work started before the error: " << dir;
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // One process, but the config asks for 2 (or 4) ranks.
  std::string e = error_of(root + "/dp2", {"distributed.data_parallel=2"});
  EXPECT_NE(e.find("world size 1 does not equal data_parallel (2) x the ranks sharing a "
                   "sequence (sequence_data_parallel 1 x context_parallel.size 1)"),
            std::string::npos)
      << e;
  e = error_of(root + "/sdp2",
               {"distributed.sequence_data_parallel=2", "distributed.data_parallel=2"});
  EXPECT_NE(e.find("world size 1 does not equal data_parallel (2) x the ranks sharing a "
                   "sequence (sequence_data_parallel 2 x context_parallel.size 1)"),
            std::string::npos)
      << e;
  e = error_of(root + "/cp2", {"distributed.context_parallel.size=2"});
  EXPECT_NE(e.find("(sequence_data_parallel 1 x context_parallel.size 2)"), std::string::npos) << e;
  // Resume without a checkpoint.
  try {
    Trainer t(make_config(root + "/empty"), q.options(nullptr, true));
    ADD_FAILURE() << "resume without a checkpoint did not throw";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("no checkpoint"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace driftless::train
