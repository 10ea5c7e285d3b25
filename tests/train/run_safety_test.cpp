// What a run refuses or survives (docs/guarantees.md), on the trainer of small random-data
// configs: non-finite steps stop the run without a checkpoint and name the gradient, a
// non-finite model is never written, --resume falls back past a damaged checkpoint and
// refuses a changed key unless allowed, a used run directory is refused, resuming past the
// last step trains nothing, and a bad token is found before any work.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "data/memmap_dataset.h"
#include "engine/core/error.h"
#include "tests/test_paths.h"
#include "tests/train/tiny_run.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace driftless::train {
namespace {

namespace fs = std::filesystem;

using tiny_run::error_of;

// The tiny run, 6 steps without validation.
Config make_config(const std::string& dir, std::vector<std::string> overrides = {}) {
  overrides.insert(overrides.begin(), {"training.steps=6", "training.eval_interval=0"});
  return tiny_run::make_config(dir, overrides);
}

struct Quiet : tiny_run::Quiet {
  TrainerOptions options(bool resume = false) { return tiny_run::Quiet::options(nullptr, resume); }
};

size_t lines_of(const std::string& path) {
  std::ifstream f(path);
  size_t n = 0;
  for (std::string line; std::getline(f, line);) n += !line.empty();
  return n;
}

void poison(Trainer& t) {
  const auto& p = t.model().slab().parameters().back();
  t.model()
      .slab()
      .params()
      .narrow(0, p.begin, 1)
      .copy_(Tensor::full({1}, std::numeric_limits<double>::quiet_NaN()));
  t.model().slab().sync_compute();
}

TEST(RunSafety, NonFiniteStepsStopTheRunWithoutACheckpoint) {
  const std::string dir = testing::scratch_dir() + "/run";
  Quiet q;
  Trainer t(make_config(dir, {"training.max_nonfinite_steps=3"}), q.options());
  poison(t);
  const std::string e = error_of([&] { t.run(); });
  const std::string first = t.model().slab().parameters().front().name;
  EXPECT_NE(e.find("3 steps in a row (0 to 2) had a non-finite loss or gradient norm, at step 0 "
                   "first in the gradient of " +
                   first),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("stopped without writing a checkpoint"), std::string::npos) << e;
  EXPECT_EQ(latest_checkpoint(dir), "");
  EXPECT_EQ(lines_of(dir + "/metrics.jsonl"), 3u);
  EXPECT_NE(q.log.str().find("update skipped (1 in a row of at most 3)"), std::string::npos)
      << q.log.str();
}

TEST(RunSafety, NonFiniteWeightsAreNeverWritten) {
  const std::string dir = testing::scratch_dir() + "/run";
  Quiet q;
  Trainer t(make_config(dir), q.options());
  poison(t);
  const std::string e = error_of([&] { t.save(0); });
  EXPECT_NE(e.find("parameter " + t.model().slab().parameters().back().name +
                   " holds a NaN or an infinity"),
            std::string::npos)
      << e;
  EXPECT_EQ(latest_checkpoint(dir), "");
}

TEST(RunSafety, ResumeFallsBackPastADamagedCheckpoint) {
  const std::string dir = testing::scratch_dir() + "/run";
  Quiet q;
  {
    Trainer t(make_config(dir, {"training.checkpoint_interval=2"}), q.options());
    ASSERT_EQ(t.run(), 0);
  }
  // Damage the data (not the header) of the newest checkpoint: 0xFF bytes at its end.
  const std::string newest = checkpoint_path(dir, 5);
  ASSERT_EQ(latest_checkpoint(dir), newest);
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-8, std::ios::end);
    const char ff[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    f.write(ff, 8);
  }
  EXPECT_NE(error_of([&] { verify_checkpoint(newest); }).find("does not match its checksum"),
            std::string::npos);
  Quiet r;
  Trainer resumed(make_config(dir, {"training.checkpoint_interval=2"}), r.options(true));
  EXPECT_EQ(resumed.next_step(), 4);
  EXPECT_NE(r.log.str().find("falling back to the newest intact checkpoint, " +
                             checkpoint_path(dir, 3) + " (step 3)"),
            std::string::npos)
      << r.log.str();
  // Loading the damaged file directly is refused too.
  layers::Gpt model(resumed.config().model);
  EXPECT_NE(error_of([&] { load_checkpoint(newest, model, nullptr); }).find("damaged"),
            std::string::npos);
}

TEST(RunSafety, ResumeRefusesAChangedKeyUnlessAllowed) {
  const std::string dir = testing::scratch_dir() + "/run";
  Quiet q;
  {
    Trainer t(make_config(dir, {"training.steps=6"}), q.options());
    for (int64_t s = 0; s < 2; ++s) t.train_step(s);
    t.save(1);
  }
  const std::string e = error_of([&] {
    Trainer t(make_config(dir, {"optimizer.lr=2.0e-2", "training.seed=8"}), q.options(true));
  });
  EXPECT_NE(e.find("optimizer.lr 0.01 -> 0.02"), std::string::npos) << e;
  EXPECT_NE(e.find("training.seed 7 -> 8"), std::string::npos) << e;
  EXPECT_NE(e.find("--allow-change optimizer.lr --allow-change training.seed"), std::string::npos)
      << e;
  // Keys that change no number (evaluation, checkpoint cadence) need no permission.
  {
    Trainer t(make_config(dir, {"training.eval_interval=3", "training.keep_checkpoints=2"}),
              q.options(true));
    EXPECT_EQ(t.next_step(), 2);
  }
  TrainerOptions o = q.options(true);
  o.allow_changes = {"optimizer.lr"};
  Trainer t(make_config(dir, {"optimizer.lr=2.0e-2"}), o);
  EXPECT_EQ(t.next_step(), 2);
  EXPECT_NE(q.log.str().find("allowed config changes (no longer bit for bit): optimizer.lr"),
            std::string::npos)
      << q.log.str();
}

TEST(RunSafety, AUsedRunDirectoryIsRefusedUnlessResumedOrOverwritten) {
  const std::string dir = testing::scratch_dir() + "/run";
  Quiet q;
  {
    Trainer t(make_config(dir, {"training.steps=2"}), q.options());
    ASSERT_EQ(t.run(), 0);
  }
  std::string e = error_of([&] { Trainer t(make_config(dir), q.options()); });
  EXPECT_NE(e.find("already holds a run (metrics.jsonl, 1 checkpoint)"), std::string::npos) << e;
  EXPECT_NE(e.find("--resume"), std::string::npos) << e;
  // While one trainer holds the directory, another is refused even with --resume.
  {
    Trainer holder(make_config(dir, {"training.steps=2"}), q.options(true));
    e = error_of([&] { Trainer t(make_config(dir, {"training.steps=2"}), q.options(true)); });
    EXPECT_NE(e.find("is in use by another run (pid "), std::string::npos) << e;
  }
  TrainerOptions o = q.options();
  o.overwrite = true;
  Trainer t(make_config(dir, {"training.steps=3"}), o);
  EXPECT_EQ(latest_checkpoint(dir), "");
  ASSERT_EQ(t.run(), 0);
  EXPECT_EQ(lines_of(dir + "/metrics.jsonl"), 3u);
}

TEST(RunSafety, ResumingPastTheLastStepTrainsNothing) {
  const std::string dir = testing::scratch_dir() + "/run";
  Quiet q;
  {
    Trainer t(make_config(dir, {"training.steps=2"}), q.options());
    ASSERT_EQ(t.run(), 0);
  }
  Quiet r;
  Trainer t(make_config(dir, {"training.steps=2"}), r.options(true));
  EXPECT_EQ(t.run(), 0);
  EXPECT_NE(r.log.str().find("nothing to train: the checkpoint is at step 1 and training.steps "
                             "is 2"),
            std::string::npos)
      << r.log.str();
  EXPECT_EQ(r.log.str().find("final loss"), std::string::npos) << r.log.str();
  EXPECT_EQ(lines_of(dir + "/metrics.jsonl"), 2u);
}

TEST(RunSafety, KeepCheckpointsRetainsTheNewest) {
  const std::string dir = testing::scratch_dir() + "/run";
  Quiet q;
  Trainer t(make_config(dir, {"training.checkpoint_interval=1", "training.keep_checkpoints=2"}),
            q.options());
  ASSERT_EQ(t.run(), 0);
  const auto kept = list_checkpoints(dir);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(kept[0].first, 5);
  EXPECT_EQ(kept[1].first, 4);
}

TEST(RunSafety, ABadTokenInTheLastDocumentIsFoundBeforeAnyWork) {
  const std::string root = testing::scratch_dir();
  {
    data::MemmapWriter w(root + "/ds", data::TokenType::u16);
    std::vector<int32_t> good(40, 3), bad = {1, 2, 60, 61};  // 61 >= vocab_size 61
    for (int i = 0; i < 20; ++i) w.add_document(good);
    w.add_document(bad);
    w.finish();
  }
  std::ofstream(root + "/ds.json") << R"({"vocab_size": 61, "end_of_text": 0})";
  Quiet q;
  const std::string dir = root + "/run";
  const std::string e = error_of([&] {
    Trainer t(make_config(dir, {"data.format=memmap", "data.path=" + root + "/ds"}), q.options());
  });
  EXPECT_NE(e.find(root + "/ds.bin: expected token ids in [0, 61), got 61"), std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists(dir)) << "the run directory was made before the data was checked";
}

}  // namespace
}  // namespace driftless::train
