// The trainer on cuda (precision.device cuda, f32) against the same run on cpu: losses of
// the first steps and the whole gradient slab of step 0, and micro_sequences 2 against 1
// on cuda (ARCHITECTURE.md "Data flow": every layout gives the gradients of `simple`). Tiny random
// config with GQA, padding-free packed documents, two layers. Skips without a GPU.
//
// Tolerances: cuda and cpu do the same f32 computation with sums in other orders (cuBLAS vs
// Eigen matmuls, tree vs sequential reductions, FMA contraction): ~1e-6 relative per op,
// compounded over a few dozen ops and three AdamW steps, so losses within 1e-4 relative and
// gradients within rms_rel 1e-4. Two cuda layouts differ only by the K/V buffer path and
// the order of gradient accumulation over micro-sequences: rms_rel 1e-5 as in CONVENTIONS.
// bf16 mixed precision against f32 on cuda, and no cudaMalloc inside a step.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/device_ops.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_paths.h"
#include "train/trainer.h"

namespace driftless::train {
namespace {

const char* kBase = R"(
model: {vocab_size: 61, n_positions: 64, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32}
data: {format: random, random_documents: 200, random_mean_length: 12, random_max_length: 48}
batch: {sequence_length: 32, sequences: 4}
optimizer: {lr: 1.0e-2, min_lr: 1.0e-3, warmup_steps: 2}
training: {steps: 3, eval_interval: 0, eval_batches: 1, seed: 7, deterministic: true}
)";

struct TrainRun {
  std::vector<double> losses;
  std::vector<float> grads0;  // gradient slab after step 0 (before the update)
};

TrainRun train(const std::string& device, std::vector<std::string> overrides = {}) {
  // Under the test's own scratch folder: tests that run at once (ctest -j) never share it.
  const std::string dir = (std::filesystem::path(testing::scratch_dir()) /
                           (device + std::to_string(overrides.size())))
                              .string();
  overrides.push_back("run.output_dir=" + dir);
  overrides.push_back("precision.device=" + device);
  Config c = parse_config_text(kBase, overrides);
  std::ostringstream log;
  TrainerOptions o;
  o.progress = false;
  o.log = &log;
  Trainer t(c, o);
  TrainRun r;
  for (int64_t s = 0; s < 3; ++s) {
    r.losses.push_back(t.train_step(s).loss);
    if (s == 0) r.grads0 = t.model().slab().grads().to(Device::cpu).to_vector<float>();
  }
  std::filesystem::remove_all(dir);
  return r;
}

double rms_rel(const std::vector<float>& t, const std::vector<float>& r) {
  double d = 0, s = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    d += (double(t[i]) - r[i]) * (double(t[i]) - r[i]);
    s += double(r[i]) * r[i];
  }
  return std::sqrt(d / std::max(s, 1e-300));
}

TEST(TrainCuda, MatchesCpu) {
  DL_REQUIRE_GPU();
  const TrainRun cpu = train("cpu"), gpu = train("cuda");
  ASSERT_EQ(cpu.grads0.size(), gpu.grads0.size());
  for (size_t s = 0; s < cpu.losses.size(); ++s) {
    const double rel = std::abs(gpu.losses[s] - cpu.losses[s]) / std::abs(cpu.losses[s]);
    std::printf("[train cuda] step %zu loss cpu %.8f cuda %.8f rel %.3g\n", s, cpu.losses[s],
                gpu.losses[s], rel);
    EXPECT_LE(rel, 1e-4) << "step " << s;
  }
  const double g = rms_rel(gpu.grads0, cpu.grads0);
  std::printf("[train cuda] step 0 gradient slab rms_rel cuda vs cpu %.3g\n", g);
  EXPECT_LE(g, 1e-4);
}

TEST(TrainCuda, MicroSequencesMatchOnCuda) {
  DL_REQUIRE_GPU();
  const TrainRun one = train("cuda"), two = train("cuda", {"schedule.micro_sequences=2"});
  const double g = rms_rel(two.grads0, one.grads0);
  std::printf("[train cuda] step 0 gradient slab rms_rel ms2 vs ms1 %.3g\n", g);
  EXPECT_LE(g, 1e-5);
  for (size_t s = 0; s < one.losses.size(); ++s)
    EXPECT_LE(std::abs(two.losses[s] - one.losses[s]), 1e-5 * std::abs(one.losses[s]));
}

// Head dim 64 in bf16 takes the fast attention kernels. With one micro-sequence the model
// reads K/V straight from the QKV product and the attention backward writes dq, dk and dv as
// blocks of one buffer that the QKV split takes as its gradient with no copy; with two, K/V
// go through the buffer. Both must give the same gradients up to bf16 rounding of the
// differently shaped products (a misplaced or dropped block is an O(1) difference).
TEST(TrainCuda, Bf16FastAttentionGradientBlocksMatchTheBufferPath) {
  DL_REQUIRE_GPU();
  const std::vector<std::string> fast = {"model.n_embd=128", "model.n_head=2", "model.n_kv_head=1",
                                         "precision.compute=bf16"};
  std::vector<std::string> two = fast;
  two.push_back("schedule.micro_sequences=2");
  const TrainRun a = train("cuda", fast), b = train("cuda", two);
  const double g = rms_rel(a.grads0, b.grads0);
  std::printf("[train cuda] bf16 head dim 64: step 0 gradient slab rms_rel ms1 vs ms2 %.3g\n", g);
  EXPECT_LE(g, 2e-2);
}

TEST(TrainCuda, Bf16MixedPrecisionTracksF32) {
  // bf16 compute (f32 masters, f32 gradients): the loss of each step within 1e-2 relative
  // of the f32 run, the step-0 gradient slab within rms_rel 5e-2 (bf16 keeps 8 bits: ~4e-3
  // per rounding, compounded through two layers' activations and their backward), and
  // the f32 master weights are what the optimizer updates (the loss keeps falling).
  DL_REQUIRE_GPU();
  const TrainRun f32 = train("cuda"), bf16 = train("cuda", {"precision.compute=bf16"});
  for (size_t s = 0; s < f32.losses.size(); ++s) {
    const double rel = std::abs(bf16.losses[s] - f32.losses[s]) / std::abs(f32.losses[s]);
    std::printf("[train cuda] step %zu loss f32 %.6f bf16 %.6f rel %.3g\n", s, f32.losses[s],
                bf16.losses[s], rel);
    EXPECT_LE(rel, 1e-2) << "step " << s;
  }
  const double g = rms_rel(bf16.grads0, f32.grads0);
  std::printf("[train cuda] step 0 gradient slab rms_rel bf16 vs f32 %.3g\n", g);
  EXPECT_LE(g, 5e-2);
  EXPECT_GT(g, 0.0);  // it really computed in bf16
}

TEST(TrainCuda, Bf16ComputeOnCpuIsAClearError) {
  try {
    train("cpu", {"precision.compute=bf16"});
    FAIL() << "bf16 compute on cpu did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
}

TEST(TrainCuda, NoDeviceAllocationAfterTheFirstStep) {
  // ARCHITECTURE.md "Memory in a step": after the first steps the caching allocator serves every
  // block; a step makes no cudaMalloc.
  DL_REQUIRE_GPU();
  for (const char* compute : {"f32", "bf16"}) {
    Config c = parse_config_text(
        kBase, {"precision.device=cuda", std::string("precision.compute=") + compute,
                "run.output_dir=/tmp/dl_alloc_test"});
    std::ostringstream log;
    TrainerOptions o;
    o.progress = false;
    o.log = &log;
    Trainer t(c, o);
    t.train_step(0);
    t.train_step(1);
    const size_t before = memory_stats(Device::cuda).system_allocations;
    t.train_step(2);
    EXPECT_EQ(memory_stats(Device::cuda).system_allocations, before) << compute;
  }
}

}  // namespace
}  // namespace driftless::train
