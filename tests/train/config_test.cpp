// The strict config: defaults, includes, overrides, every problem reported with its YAML
// path in one message, round trip through the dumped YAML, and the shipped configs load.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/core/error.h"
#include "train/config.h"
#include "train/resume.h"
#include "tests/error_of.h"
#include "tests/test_paths.h"

namespace driftless::train {
namespace {

using testing::error_of;

TEST(Config, DefaultsAndValues) {
  Config c = parse_config_text("model: {n_layer: 2, n_head: 4, n_embd: 64}\nbatch: {sequences: 4}\n");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.n_embd, 64);
  EXPECT_EQ(c.model.kv_heads(), 4);
  EXPECT_EQ(c.batch.sequences, 4);
  EXPECT_EQ(c.optimizer.decay, optim::LrDecay::cosine);
  EXPECT_TRUE(c.run.tensor_logs.steps.empty());
}

TEST(Config, AllProblemsInOneMessageWithPaths) {
  std::string err = error_of([] {
    parse_config_text(
        "model: {n_layr: 2, n_head: -1, dropout: lots}\n"
        "optimizer: {decay: exponential}\n"
        "training: {steps: 1.5, deterministic: maybe}\n"
        "run: {tensor_logs: {kinds: [forward, everything]}}\n"
        "bogus: 1\n");
  });
  EXPECT_NE(err.find("[config] 8 problems"), std::string::npos) << err;
  EXPECT_NE(err.find("model.n_layr: unknown key (did you mean model.n_layer?)"), std::string::npos) << err;
  EXPECT_NE(err.find("model.n_head: value -1 out of range [1, 1024]"), std::string::npos) << err;
  EXPECT_NE(err.find("model.dropout: expected a number, got 'lots'"), std::string::npos) << err;
  EXPECT_NE(err.find("optimizer.decay: 'exponential' is not one of: cosine, linear, constant"), std::string::npos) << err;
  EXPECT_NE(err.find("training.steps: expected an integer, got '1.5'"), std::string::npos) << err;
  EXPECT_NE(err.find("training.deterministic: expected true or false"), std::string::npos) << err;
  EXPECT_NE(err.find("run.tensor_logs.kinds: 'everything' is not one of"), std::string::npos) << err;
  EXPECT_NE(err.find("bogus: unknown key"), std::string::npos) << err;
}

// Context parallelism: both layouts parse; what each cannot take is refused up
// front with the reason.
TEST(Config, ContextParallelRules) {
  Config c = parse_config_text(
      "distributed: {context_parallel: {size: 2, kind: a2a}}\nmodel: {n_head: 4, n_embd: 64}\n");
  EXPECT_EQ(c.distributed.context_parallel.size, 2);
  EXPECT_EQ(c.distributed.context_parallel.kind, layers::ContextParallel::a2a);
  std::string err = error_of([] {
    parse_config_text(
        "distributed: {context_parallel: {size: 3, kind: ring}, sequence_data_parallel: 2}\n"
        "batch: {sequence_length: 64}\nmodel: {alibi: true}\ndata: {pad_documents_to: 8}\n"
        "precision: {device: cuda}\n");
  });
  EXPECT_NE(err.find("both share sequences; choose one"), std::string::npos) << err;
  EXPECT_NE(err.find("must divide into 2 x distributed.context_parallel.size (6) chunks"),
            std::string::npos) << err;
  EXPECT_NE(err.find("hybrid do not take data.pad_documents_to"), std::string::npos) << err;
  err = error_of([] {
    parse_config_text("distributed: {context_parallel: {size: 4, kind: a2a}}\n"
                      "model: {n_head: 4, n_kv_head: 2, n_embd: 64}\n");
  });
  EXPECT_NE(err.find("a2a needs model.n_head (4) and the key/value heads (2) divisible by its size (4)"),
            std::string::npos) << err;
  err = error_of([] { parse_config_text("distributed: {context_parallel: {kind: zigzag}}\n"); });
  EXPECT_NE(err.find("'zigzag' is not one of: ring, a2a"), std::string::npos) << err;
}

// Each ring and hybrid call covers its chunk's keys from its first document's start, so
// modifiers see document positions: expressions of q and k, masks and ALiBi load on CPU and
// on CUDA alike.
TEST(Config, RingPositionsOfExpressions) {
  const std::string exprs =
      "model: {n_embd: 64, n_head: 4, score_mod: 'score - 0.1 * (q - k)', mask_mod: 'k < 4 || "
      "q - k < 24'}\nbatch: {sequence_length: 64}\n";
  for (const char* kind : {"ring", "hybrid"}) {
    const std::string cp = std::string("distributed: {context_parallel: {size: 2, kind: ") + kind +
                           ", group_size: 1}}\n";
    for (const char* device : {"cpu", "cuda"}) {
      const std::string on = std::string("precision: {device: ") + device + "}\n";
      EXPECT_NO_THROW(parse_config_text(cp + exprs + on)) << kind << " " << device;
      EXPECT_NO_THROW(
          parse_config_text(cp + "model: {alibi: true}\nbatch: {sequence_length: 64}\n" + on))
          << kind << " " << device;
    }
  }
}

// Mask expressions run on CUDA (the fast kernels compiled at run time), alone and with a score
// expression: the config takes them there as on the CPU.
TEST(Config, MaskModRunsOnCuda) {
  for (const char* model :
       {"model: {n_embd: 64, n_head: 4, mask_mod: 'q - k < 24 || k < 4'}\n",
        "model: {n_embd: 64, n_head: 4, score_mod: 'score - 0.1 * (q - k)', mask_mod: 'h != 1 || "
        "q - k < 8'}\n"})
    EXPECT_NO_THROW(parse_config_text(std::string(model) +
                                      "batch: {sequence_length: 64}\nprecision: {device: cuda}\n"))
        << model;
}

TEST(Config, CrossFieldRules) {
  std::string err = error_of([] {
    parse_config_text("model: {n_embd: 100, n_head: 3}\nbatch: {sequence_length: 100, sequences: 3}\n"
                      "schedule: {micro_sequences: 3}\n");
  });
  EXPECT_NE(err.find("model.n_embd (100) must be divisible by model.n_head (3)"), std::string::npos) << err;
  EXPECT_NE(err.find("must be divisible by schedule.micro_sequences (3)"), std::string::npos) << err;
  err = error_of([] { parse_config_text("training: {steps: 5}\n"); });
  EXPECT_NE(err.find("optimizer.warmup_steps (10) must not exceed training.steps (5)"), std::string::npos) << err;
  err = error_of([] { parse_config_text("model: 3\n"); });
  EXPECT_NE(err.find("model: expected a mapping of keys"), std::string::npos) << err;
}

TEST(Config, NaNIsRefusedInEveryFloatKey) {
  // Ranges alone let NaN through (every comparison with it is false): grad_clip and softcap
  // were read as "off", and lr failed with the min_lr rule instead of its own.
  for (const char* key : {"optimizer.grad_clip", "model.softcap", "optimizer.lr",
                          "distributed.bucket_mb", "precision.peak_tflops"}) {
    const std::string err = error_of([&] { parse_config_text("", {std::string(key) + "=.nan"}); });
    EXPECT_NE(err.find(std::string(key) + ": expected a number, got NaN"), std::string::npos)
        << err;
    EXPECT_EQ(err.find("min_lr"), std::string::npos) << err;
  }
  const std::string err = error_of([] { parse_config_text("", {"optimizer.lr=.inf"}); });
  EXPECT_NE(err.find("optimizer.lr: value inf out of range [0, 10]"), std::string::npos) << err;
}

TEST(Config, OverridesAndIncludes) {
  std::string dir = driftless::testing::scratch_dir();
  std::ofstream(dir + "/base.yaml") << "model: {n_layer: 6, n_head: 4, n_embd: 128}\noptimizer: {lr: 0.001}\n";
  std::ofstream(dir + "/run.yaml") << "include: base.yaml\nmodel: {n_layer: 3}\n";
  Config c = load_config(dir + "/run.yaml", {"model.n_embd=256", "training.steps=7", "optimizer.warmup_steps=2",
                                             "run.tensor_logs.steps=[1, 2]"});
  EXPECT_EQ(c.model.n_layer, 3);  // own key beats the include
  EXPECT_EQ(c.model.n_head, 4);   // from the include
  EXPECT_EQ(c.model.n_embd, 256);  // override beats both
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.001);
  EXPECT_EQ(c.training.steps, 7);
  EXPECT_EQ(c.run.tensor_logs.steps, (std::vector<int64_t>{1, 2}));
  std::string err = error_of([&] { load_config(dir + "/run.yaml", {"model.n_layer"}); });
  EXPECT_NE(err.find("must look like key.path=value"), std::string::npos) << err;
  err = error_of([&] { load_config(dir + "/missing.yaml"); });
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
}

TEST(Config, DumpRoundTrips) {
  Config c = parse_config_text("model: {n_layer: 5}\nrun: {tensor_logs: {steps: [0, 3]}}\n",
                               {"optimizer.decay=linear"});
  Config d = parse_config_text(config_to_yaml(c));
  EXPECT_EQ(config_to_yaml(c), config_to_yaml(d));
  EXPECT_EQ(d.model.n_layer, 5);
  EXPECT_EQ(d.optimizer.decay, optim::LrDecay::linear);
  // Enums are dumped by name and refused by name, with the allowed ones listed.
  EXPECT_NE(config_to_yaml(d).find("decay: linear"), std::string::npos);
  EXPECT_NE(
      config_reference().find("| `distributed.kv_exchange` | string | `needed` | needed, full |"),
      std::string::npos);
  const std::string err = error_of([] {
    parse_config_text("", {"distributed.context_parallel.kind=none", "precision.compute=f64"});
  });
  EXPECT_NE(err.find("distributed.context_parallel.kind: 'none' is not one of: ring, a2a"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("precision.compute: 'f64' is not one of: f32, bf16"), std::string::npos)
      << err;
  EXPECT_EQ(d.run.tensor_logs.steps, (std::vector<int64_t>{0, 3}));
  EXPECT_NE(config_reference().find("| `model.n_layer` | int | `12` |"), std::string::npos);
}

TEST(Config, KernelCacheKeys) {
  const Config d = parse_config_text("");
  EXPECT_EQ(d.attention.kernel_cache.capacity, 64);
  EXPECT_EQ(kernel_cache_options(d).capacity, 64);
  EXPECT_EQ(kernel_cache_options(d).dir, layers::jit::default_cache_dir());
  const Config off = parse_config_text("attention: {kernel_cache: {capacity: 3, dir: 'off'}}");
  EXPECT_EQ(kernel_cache_options(off).capacity, 3);
  EXPECT_EQ(kernel_cache_options(off).dir, "");
  const Config at = parse_config_text("", {"attention.kernel_cache.dir=/scratch/kernels"});
  EXPECT_EQ(kernel_cache_options(at).dir, "/scratch/kernels");
  EXPECT_EQ(parse_config_text(config_to_yaml(off)).attention.kernel_cache.dir, "off");
  const std::string err =
      error_of([] { parse_config_text("", {"attention.kernel_cache.capacity=0"}); });
  EXPECT_NE(err.find("attention.kernel_cache.capacity"), std::string::npos) << err;
  // Where compiled kernels are kept changes no number of a run: --resume takes either.
  EXPECT_TRUE(changes_no_numbers("attention.kernel_cache.dir", off, at));
  EXPECT_TRUE(changes_no_numbers("attention.kernel_cache.capacity", off, at));
}

// model.score_mod_params: learnable tables become declarations the model puts in its slab;
// a CUDA run takes them up to the entries one dK/dV block keeps (layers::expr::grad_slots),
// and refuses larger ones with the key and the limit in the message.
TEST(Config, LearnableExpressionParameters) {
  const std::string model =
      "model: {n_embd: 64, n_head: 4, score_mod: 'score + bias[h, clamp(q - k, 0, 3)]',\n"
      "        score_mod_params: {bias: {shape: [heads, 4], init: 0.5, learnable: true}}}\n";
  Config c = parse_config_text(model);
  ASSERT_EQ(c.model.score_mod_decls.size(), 1u);
  EXPECT_TRUE(c.model.score_mod_decls[0].learnable);
  EXPECT_EQ(c.model.score_mod_decls[0].shape, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(c.model.score_mod_decls[0].init, std::vector<double>(16, 0.5));
  const std::string cuda = "precision: {device: cuda}\n";
  const std::string ok = error_of([&] { parse_config_text(model + cuda); });
  EXPECT_EQ(ok.find("score_mod_params"), std::string::npos) << ok;
  // (H, 5000) read by h: a block keeps 5000 entries (one query head a K/V head).
  auto table = [](const std::string& subscript, int n) {
    return "model: {n_embd: 64, n_head: 4, score_mod: 'score + bias[" + subscript +
           ", clamp(q - k, 0, 3)]',\n        score_mod_params: {bias: {shape: [heads, " +
           std::to_string(n) + "], init: 0.5, learnable: true}}}\n";
  };
  std::string err = error_of([&] { parse_config_text(table("h", 5000) + cuda); });
  EXPECT_NE(err.find("model.score_mod_params"), std::string::npos) << err;
  EXPECT_NE(err.find("at most 4096"), std::string::npos) << err;
  EXPECT_EQ(error_of([&] { parse_config_text(table("h", 1000) + cuda); }).find("score_mod_params"),
            std::string::npos);
  // Not subscripted by h first: every block keeps the whole (4, 1100) table.
  err = error_of([&] { parse_config_text(table("min(h, 1)", 1100) + cuda); });
  EXPECT_NE(err.find("at most 4096"), std::string::npos) << err;
  EXPECT_EQ(error_of([&] { parse_config_text(table("min(h, 1)", 1100)); }), "");  // CPU: any size
}

TEST(Config, ArchitectureRules) {
  Config c = parse_config_text(
      "model: {architecture: llama, n_embd: 64, n_head: 4, n_kv_head: 2, intermediate_size: 176, "
      "rope_theta: 100000, tie_word_embeddings: false, sliding_window: 32}\n");
  EXPECT_TRUE(c.model.is_llama());
  EXPECT_EQ(c.model.mlp_width(), 176);
  EXPECT_EQ(c.model.rope_theta, 100000.0);
  EXPECT_FALSE(c.model.tie_word_embeddings);
  EXPECT_EQ(parse_config_text("model: {n_embd: 64, n_head: 4}").model.mlp_width(), 256);
  // gpt2 names every llama-only key set away from its default.
  std::string err = error_of([] {
    parse_config_text("model: {rope_theta: 500000, sliding_window: 8, tie_word_embeddings: false}");
  });
  for (const char* key : {"rope_theta", "sliding_window", "tie_word_embeddings"})
    EXPECT_NE(err.find(std::string("model.") + key + " is a model.architecture llama key"),
              std::string::npos)
        << err;
  EXPECT_EQ(err.find("intermediate_size"), std::string::npos) << err;
  // Rotary positions need an even head dim (48 / 8 = 6 is fine, 40 / 8 = 5 is not).
  EXPECT_NO_THROW(parse_config_text("model: {architecture: llama, n_embd: 48, n_head: 8}"));
  err = error_of([] { parse_config_text("model: {architecture: llama, n_embd: 40, n_head: 8}"); });
  EXPECT_NE(err.find("even head dim"), std::string::npos) << err;
  // Every context-parallel kind honours a sliding window.
  for (const char* kind : {"ring", "a2a", "hybrid"})
    EXPECT_NO_THROW(parse_config_text(
        std::string("model: {architecture: llama, n_embd: 64, n_head: 4, sliding_window: 8}\n"
                    "distributed: {context_parallel: {size: 2, group_size: 1, kind: ") +
        kind + "}}\n"))
        << kind;
  err = error_of([] { parse_config_text("model: {architecture: mamba}"); });
  EXPECT_NE(err.find("'mamba' is not one of: gpt2, llama"), std::string::npos) << err;
}

TEST(Config, ShippedConfigsLoad) {
  namespace fs = std::filesystem;
  int n = 0;
  for (const char* sub : {"models", "runs", "regress"}) {
    fs::path dir = fs::path(driftless::testing::source_dir()) / "configs" / sub;
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() != ".yaml") continue;
      if (sub == std::string("regress")) continue;  // regress configs have their own schema
      EXPECT_NO_THROW(load_config(e.path().string())) << e.path();
      ++n;
    }
  }
  EXPECT_GE(n, 4);
}

}  // namespace
}  // namespace driftless::train
