// Careless and hostile run configs (train/config.h): duplicate keys, empty override paths,
// an include that is no file, score_mod_params whose shapes or values cannot be held, and
// batch products past what a run can index are refused naming the key, before anything is
// allocated for them.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "engine/core/error.h"
#include "tests/error_of.h"
#include "tests/test_paths.h"
#include "train/config.h"

namespace driftless::train {
namespace {

using testing::error_of;

#define EXPECT_REFUSED(expr, fragment)                                             \
  do {                                                                             \
    const std::string e_ = error_of([&] { expr; });                                \
    EXPECT_NE(e_.find(fragment), std::string::npos) << #expr << "\n  got: " << e_; \
  } while (0)

TEST(ConfigHostile, DuplicateKeysAreRefusedNamingTheKeyAndLines) {
  EXPECT_REFUSED(
      parse_config_text("optimizer: {lr: 0.1}\nmodel: {n_layer: 2}\noptimizer: {lr: 5}\n"),
      "optimizer is given twice (lines 1 and 3)");
  EXPECT_REFUSED(parse_config_text("optimizer:\n  lr: 0.1\n  warmup_steps: 0\n  lr: 5\n"),
                 "optimizer.lr is given twice (lines 2 and 4)");
  const std::string dir = testing::scratch_dir();
  std::ofstream(dir + "/base.yaml") << "model:\n  n_layer: 2\n  n_layer: 3\n";
  std::ofstream(dir + "/run.yaml") << "include: base.yaml\n";
  EXPECT_REFUSED(load_config(dir + "/run.yaml"), dir + "/base.yaml: model.n_layer is given twice");
  EXPECT_REFUSED(parse_config_text("", {"model={n_layer: 2, n_layer: 3}"}),
                 "override 'model={n_layer: 2, n_layer: 3}': n_layer is given twice");
}

TEST(ConfigHostile, OverridePathsNeedEveryKey) {
  for (const char* bad : {".=1", "model.=1", ".model=1", "model..n_layer=1"})
    EXPECT_REFUSED(parse_config_text("", {bad}), "(an empty key)");
}

TEST(ConfigHostile, IncludeOfADirectoryOrFifoIsRefused) {
  const std::string dir = testing::scratch_dir();
  std::filesystem::create_directories(dir + "/folder");
  std::ofstream(dir + "/run.yaml") << "include: folder\n";
  EXPECT_REFUSED(load_config(dir + "/run.yaml"),
                 "expected a regular file, got " + dir + "/folder (a directory)");
  ASSERT_EQ(::mkfifo((dir + "/pipe.yaml").c_str(), 0600), 0);
  std::ofstream(dir + "/run2.yaml") << "include: pipe.yaml\n";
  EXPECT_REFUSED(load_config(dir + "/run2.yaml"), "(a FIFO)");
  EXPECT_REFUSED(load_config(dir + "/pipe.yaml"), "(a FIFO)");
}

std::string with_param(const std::string& param) {
  return "model: {n_embd: 64, n_head: 4, score_mod: 'score + bias[h, clamp(q - k, 0, 3)]',\n"
         "        score_mod_params: {bias: " +
         param + "}}\n";
}

// [heads, 100000000] would take seconds and gigabytes to fill; [heads, -3] and [heads, 2^62]
// ended in internal errors. Each is refused by its key before any table exists.
TEST(ConfigHostile, ScoreModParamShapesAreBoundedBeforeAllocation) {
  EXPECT_REFUSED(parse_config_text(with_param("{shape: [heads, 100000000], init: 0.5}")),
                 "model.score_mod_params.bias.shape[1]: expected at most 16777216, got 100000000");
  EXPECT_REFUSED(parse_config_text(with_param("{shape: [heads, -3], init: 0.5}")),
                 "model.score_mod_params.bias.shape[1]: expected a positive integer or heads, "
                 "got -3");
  EXPECT_REFUSED(parse_config_text(with_param("{shape: [heads, 4611686018427387904], init: 0}")),
                 "model.score_mod_params.bias.shape[1]: expected at most");
  EXPECT_REFUSED(parse_config_text(with_param("{shape: [heads, 1.5], init: 0}")),
                 "model.score_mod_params.bias.shape[1]: expected a positive integer");
  EXPECT_REFUSED(parse_config_text(with_param("{shape: [heads, 8388608], init: 0}")),
                 "model.score_mod_params.bias.shape: expected a table of at most 16777216 "
                 "entries, got 2 dimensions 4 x 8388608");
  EXPECT_REFUSED(
      parse_config_text("model: {n_layer: 200, " + with_param("{shape: [heads, 4000000], init: 0, "
                                                              "learnable: true}")
                                                       .substr(8)),
      "learnable tables hold 3200000000 entries over model.n_layer 200 layers");
  EXPECT_EQ(error_of([&] { parse_config_text(with_param("{shape: [heads, 4], init: 0.5}")); }), "");
}

TEST(ConfigHostile, ScoreModParamInitMustBeFinite) {
  EXPECT_REFUSED(parse_config_text(with_param("{shape: [heads, 4], init: .nan}")),
                 "model.score_mod_params.bias.init: expected a finite number, got nan");
  EXPECT_REFUSED(parse_config_text(with_param("{shape: [heads], init: [1, .inf, 2, 3]}")),
                 "model.score_mod_params.bias.init: expected a finite number, got inf");
  EXPECT_REFUSED(parse_config_text(with_param("{shape: [heads, 4], init: [1, 2]}")),
                 "model.score_mod_params.bias.init: expected one number or 16 values, got 2");
}

// 16777216 x 1048576 tokens, each factor within its range, allocated 7 GB before failing.
TEST(ConfigHostile, GlobalBatchTokensAreBounded) {
  EXPECT_REFUSED(
      parse_config_text("batch: {sequence_length: 16777216, sequences: 1048576}\n"
                        "model: {n_positions: 16777216}\n"),
      "batch.sequences (1048576) x batch.sequence_length (16777216) must be at most 2147483647");
}

}  // namespace
}  // namespace driftless::train
