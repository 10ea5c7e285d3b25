// The run directory's owner: one lock holder at a time, a used directory refused unless
// resumed or overwritten, stale temporaries of killed writes removed, and a directory that
// cannot be created or written reported before any step.
#include "train/run_directory.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace driftless::train
