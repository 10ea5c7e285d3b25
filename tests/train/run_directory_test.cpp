// The run directory's owner: one lock holder at a time, a used directory refused unless
// resumed or overwritten, stale temporaries of killed writes removed, and a directory that
// cannot be created or written reported before any step.
#include "train/run_directory.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"
#include "tests/test_paths.h"
#include "tests/train/tiny_run.h"

namespace driftless::train {
namespace {

namespace fs = std::filesystem;

using tiny_run::error_of;

TEST(RunDirectory, OneHolderAtATime) {
  const std::string dir = testing::scratch_dir() + "/run";
  std::ostringstream log;
  {
    RunDirectory first(dir, RunDirMode::fresh, log);
    const std::string e = error_of([&] { RunDirectory second(dir, RunDirMode::resume, log); });
    EXPECT_NE(e.find("the run directory " + dir + " is in use by another run (pid "),
              std::string::npos)
        << e;
  }
  RunDirectory again(dir, RunDirMode::fresh, log);  // released with its holder
}

TEST(RunDirectory, AUsedDirectoryNeedsResumeOrOverwrite) {
  const std::string dir = testing::scratch_dir() + "/run";
  fs::create_directories(dir + "/checkpoints");
  std::ofstream(dir + "/metrics.jsonl") << "{\"step\": 0, \"loss\": 1}\n";
  std::ofstream(dir + "/checkpoints/step_000003.safetensors") << "x";
  std::ostringstream log;
  const std::string e = error_of([&] { RunDirectory d(dir, RunDirMode::fresh, log); });
  EXPECT_NE(e.find("already holds a run (metrics.jsonl, 1 checkpoint); continue it with "
                   "--resume, or start over with --overwrite"),
            std::string::npos)
      << e;
  { RunDirectory d(dir, RunDirMode::resume, log); }
  EXPECT_TRUE(fs::exists(dir + "/metrics.jsonl"));
  { RunDirectory d(dir, RunDirMode::overwrite, log); }
  EXPECT_FALSE(fs::exists(dir + "/metrics.jsonl"));
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step_000003.safetensors"));
  EXPECT_TRUE(fs::is_directory(dir + "/checkpoints"));
  // An empty directory (or one with an empty metrics file) is not a run.
  RunDirectory d(dir, RunDirMode::fresh, log);
}

TEST(RunDirectory, StaleTemporariesAreRemoved) {
  const std::string dir = testing::scratch_dir() + "/run";
  fs::create_directories(dir + "/checkpoints");
  std::ofstream(dir + "/checkpoints/step_000004.safetensors.tmp.12345") << "partial";
  std::ofstream(dir + "/checkpoints/notes.txt") << "mine";
  std::ostringstream log;
  RunDirectory d(dir, RunDirMode::fresh, log);
  EXPECT_FALSE(fs::exists(dir + "/checkpoints/step_000004.safetensors.tmp.12345"));
  EXPECT_TRUE(fs::exists(dir + "/checkpoints/notes.txt"));
  EXPECT_NE(log.str().find("removed 1 temporary file of interrupted writes"), std::string::npos)
      << log.str();
}

TEST(RunDirectory, UncreatableOrUnwritableIsAnError) {
  const std::string root = testing::scratch_dir();
  std::ofstream(root + "/a_file") << "x";
  std::ostringstream log;
  std::string e = error_of([&] { RunDirectory d(root + "/a_file/run", RunDirMode::fresh, log); });
  EXPECT_NE(e.find("cannot create the run directory " + root + "/a_file/run (run.output_dir)"),
            std::string::npos)
      << e;
  // checkpoints/ taken by a file: found now, not at the first checkpoint.
  fs::create_directories(root + "/run");
  std::ofstream(root + "/run/checkpoints") << "x";
  e = error_of([&] { RunDirectory d(root + "/run", RunDirMode::fresh, log); });
  EXPECT_NE(e.find("cannot write checkpoints in " + root + "/run/checkpoints"), std::string::npos)
      << e;
}

std::string contents(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A symbolic link named .lock is refused, not followed: its target stays as it was.
TEST(RunDirectory, TheLockFollowsNoLinkAndWaitsOnNoFifo) {
  const std::string root = testing::scratch_dir();
  std::ofstream(root + "/precious.txt") << "keep me";
  fs::create_directories(root + "/run");
  fs::create_symlink(root + "/precious.txt", root + "/run/.lock");
  std::ostringstream log;
  std::string e = error_of([&] { RunDirectory d(root + "/run", RunDirMode::fresh, log); });
  EXPECT_NE(e.find("(" + root + "/run/.lock): it is a symbolic link; remove it"), std::string::npos)
      << e;
  EXPECT_EQ(contents(root + "/precious.txt"), "keep me");
  fs::remove(root + "/run/.lock");
  ASSERT_EQ(::mkfifo((root + "/run/.lock").c_str(), 0600), 0);
  e = error_of([&] { RunDirectory d(root + "/run", RunDirMode::fresh, log); });
  EXPECT_NE(e.find("holds " + root + "/run/.lock as a special file"), std::string::npos) << e;
  fs::remove(root + "/run/.lock");
  fs::create_hard_link(root + "/precious.txt", root + "/run/.lock");
  e = error_of([&] { RunDirectory d(root + "/run", RunDirMode::fresh, log); });
  EXPECT_NE(e.find("other hard links"), std::string::npos) << e;
  EXPECT_EQ(contents(root + "/precious.txt"), "keep me");
}

TEST(RunDirectory, SystemDirectoriesAreRefused) {
  std::ostringstream log;
  for (const std::string dir : {"/", "/etc", "/usr/lib", "//proc/self/../self"}) {
    const std::string e = error_of([&] { RunDirectory d(dir, RunDirMode::overwrite, log); });
    EXPECT_NE(e.find("choose a directory of its own"), std::string::npos) << dir << ": " << e;
  }
}

// --overwrite through a symbolic link to another project's folder deletes what driftless
// wrote there and nothing else.
TEST(RunDirectory, OverwriteDeletesOnlyWhatDriftlessWrote) {
  const std::string root = testing::scratch_dir();
  fs::create_directories(root + "/project/checkpoints");
  std::ofstream(root + "/project/checkpoints/my_model.bin") << "weights";
  std::ofstream(root + "/project/checkpoints/step_000004.safetensors") << "x";
  std::ofstream(root + "/project/metrics.jsonl") << "{\"step\": 0, \"loss\": 1}\n";
  fs::create_symlink(root + "/project", root + "/run");
  std::ostringstream log;
  { RunDirectory d(root + "/run", RunDirMode::overwrite, log); }
  EXPECT_EQ(contents(root + "/project/checkpoints/my_model.bin"), "weights");
  EXPECT_FALSE(fs::exists(root + "/project/checkpoints/step_000004.safetensors"));
  EXPECT_FALSE(fs::exists(root + "/project/metrics.jsonl"));
  EXPECT_NE(log.str().find("kept 1 file in checkpoints/ or tensor_logs/ that driftless did not "
                           "write"),
            std::string::npos)
      << log.str();
}

// What a run writes in place must be its own file: a symbolic link or a FIFO under the
// name of metrics.jsonl or config.yaml is refused before anything is written through it.
TEST(RunDirectory, ForeignFilesUnderTheRunsNamesAreRefused) {
  const std::string root = testing::scratch_dir();
  std::ofstream(root + "/precious.txt") << "keep me";
  fs::create_directories(root + "/run");
  fs::create_symlink(root + "/precious.txt", root + "/run/config.yaml");
  std::ostringstream log;
  std::string e = error_of([&] { RunDirectory d(root + "/run", RunDirMode::fresh, log); });
  EXPECT_NE(e.find("holds " + root + "/run/config.yaml as a symbolic link"), std::string::npos)
      << e;
  fs::remove(root + "/run/config.yaml");
  ASSERT_EQ(::mkfifo((root + "/run/metrics.jsonl").c_str(), 0600), 0);
  e = error_of([&] { RunDirectory d(root + "/run", RunDirMode::resume, log); });
  EXPECT_NE(e.find("holds " + root + "/run/metrics.jsonl as a FIFO"), std::string::npos) << e;
  EXPECT_EQ(contents(root + "/precious.txt"), "keep me");
}

// Names a run cannot have written (a step past 2^63, a directory) neither block a fresh run,
// --resume nor --overwrite, and --overwrite leaves them.
TEST(RunDirectory, ImpossibleCheckpointNamesBlockNothing) {
  const std::string dir = testing::scratch_dir() + "/run";
  fs::create_directories(dir + "/checkpoints/step_000007.safetensors");
  const std::string huge = dir + "/checkpoints/step_" + std::string(30, '1') + ".safetensors";
  std::ofstream(huge) << "x";
  std::ostringstream log;
  { RunDirectory d(dir, RunDirMode::fresh, log); }
  { RunDirectory d(dir, RunDirMode::overwrite, log); }
  EXPECT_TRUE(fs::exists(huge));
}

}  // namespace
}  // namespace driftless::train
