// Reading metrics.jsonl (train/metrics_file.h): train and validation lines, a resumed
// run's repeated steps, non-finite values, and errors that name the file and line.
#include "train/metrics_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"
#include "tests/test_paths.h"

namespace driftless::train {
namespace {

namespace fs = std::filesystem;

RunMetrics parse(const std::string& text, const std::string& source = "run/metrics.jsonl") {
  std::istringstream in(text);
  return parse_metrics(in, source);
}

std::string error_of(const std::string& text) {
  try {
    parse(text, "m.jsonl");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(MetricsFile, ParsesTrainAndValidationLines) {
  const RunMetrics m = parse(
      R"({"step":0,"loss":10.5,"lr":0.001,"grad_norm":2.0,"tokens":128,"tokens_per_second":1000.0,"mfu":0.0,"step_seconds":0.1}
{"step":1,"loss":9.25,"lr":0.001,"grad_norm":1.5,"tokens":128,"tokens_per_second":1100.5,"mfu":0.0,"step_seconds":0.1}

{"step":1,"val_loss":9.5}
{"step":2,"loss":8.0,"tokens_per_second":1200}
{"step":2,"note":"a kind of line not plotted"}
)");
  ASSERT_EQ(m.loss.size(), 3u);
  EXPECT_EQ(m.loss[1].step, 1);
  EXPECT_DOUBLE_EQ(m.loss[1].value, 9.25);
  ASSERT_EQ(m.val_loss.size(), 1u);
  EXPECT_EQ(m.val_loss[0].step, 1);
  EXPECT_DOUBLE_EQ(m.val_loss[0].value, 9.5);
  ASSERT_EQ(m.tokens_per_second.size(), 3u);
  EXPECT_DOUBLE_EQ(m.tokens_per_second[2].value, 1200);
  EXPECT_EQ(m.non_finite, 0);
  EXPECT_EQ(m.path, "run/metrics.jsonl");
}

TEST(MetricsFile, ResumedRunKeepsTheLastValueOfAStep) {
  // A run resumed from the checkpoint of step 1 appends steps 2.. again.
  const RunMetrics m = parse(
      "{\"step\":0,\"loss\":4}\n{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2.5}\n"
      "{\"step\":2,\"loss\":2}\n{\"step\":3,\"loss\":1}\n");
  ASSERT_EQ(m.loss.size(), 4u);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(m.loss[size_t(i)].step, i);
  EXPECT_DOUBLE_EQ(m.loss[2].value, 2);
}

TEST(MetricsFile, NonFiniteValuesAreLeftOutAndCounted) {
  // The trainer writes NaN and infinity as null.
  const RunMetrics m = parse(
      "{\"step\":0,\"loss\":4}\n{\"step\":1,\"loss\":null}\n{\"step\":1,\"val_loss\":null}\n"
      "{\"step\":2,\"loss\":3}\n");
  ASSERT_EQ(m.loss.size(), 2u);
  EXPECT_EQ(m.loss[1].step, 2);
  EXPECT_TRUE(m.val_loss.empty());
  EXPECT_EQ(m.non_finite, 2);
}

TEST(MetricsFile, AFailedWriteIsAnError) {
  // /dev/full: every write fails with ENOSPC, as on a full disk.
  MetricsWriter w;
  w.open("/dev/full", true);
  std::string e;
  try {
    w.write("{\"step\":0,\"loss\":4}");
  } catch (const Error& err) {
    e = err.what();
  }
  EXPECT_NE(e.find("writing /dev/full failed: No space left on device"), std::string::npos) << e;
}

TEST(MetricsFile, MalformedLinesNameFileAndLine) {
  const std::string ok = "{\"step\":0,\"loss\":4}\n";
  std::string e = error_of(ok + ok + "{\"step\":2,\"loss\":\n");
  EXPECT_NE(e.find("[plot] m.jsonl:3: expected a JSON object"), std::string::npos) << e;
  e = error_of(ok + "[1, 2]\n");
  EXPECT_NE(e.find("m.jsonl:2: expected a JSON object, got '[1, 2]'"), std::string::npos) << e;
  e = error_of(ok + "{\"loss\":3}\n");
  EXPECT_NE(e.find("m.jsonl:2: expected an integer \"step\" >= 0, got none"), std::string::npos)
      << e;
  e = error_of("{\"step\":1.5,\"loss\":3}\n");
  EXPECT_NE(e.find("m.jsonl:1: expected an integer \"step\""), std::string::npos) << e;
  e = error_of(ok + ok + ok + "{\"step\":3,\"val_loss\":\"low\"}\n");
  EXPECT_NE(e.find("m.jsonl:4: expected a number for \"val_loss\", got \"low\""), std::string::npos)
      << e;
}

TEST(MetricsFile, ReadRunMetricsErrors) {
  const fs::path dir = driftless::testing::scratch_dir();
  auto error_of_read = [](const fs::path& p) {
    try {
      read_run_metrics(p.string());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of_read(dir / "absent").find("no such run directory"), std::string::npos);
  fs::create_directories(dir / "no_metrics");
  EXPECT_NE(error_of_read(dir / "no_metrics").find("no_metrics: no metrics.jsonl"),
            std::string::npos);
  fs::create_directories(dir / "empty");
  std::ofstream(dir / "empty/metrics.jsonl") << "\n";
  EXPECT_NE(error_of_read(dir / "empty").find("metrics.jsonl: no data points"), std::string::npos)
      << error_of_read(dir / "empty");
  fs::create_directories(dir / "diverged");
  std::ofstream(dir / "diverged/metrics.jsonl") << "{\"step\":0,\"loss\":null}\n";
  EXPECT_NE(error_of_read(dir / "diverged").find("1 losses are non-finite"), std::string::npos);
  fs::create_directories(dir / "one");
  std::ofstream(dir / "one/metrics.jsonl") << "{\"step\":0,\"loss\":5}\n";
  const RunMetrics m = read_run_metrics((dir / "one/").string());
  EXPECT_EQ(m.name, "one");
  EXPECT_EQ(m.loss.size(), 1u);
  // The metrics file named directly.
  EXPECT_EQ(read_run_metrics((dir / "one/metrics.jsonl").string()).name, "one");
}

TEST(MetricsFile, NamesAreDirectoryNamesMadeUnique) {
  EXPECT_EQ(run_name("runs/regress/sdp2/"), "sdp2");
  EXPECT_EQ(run_name("runs/regress/sdp2"), "sdp2");
  std::vector<RunMetrics> runs(4);
  runs[0].path = "/r/lr1/run/metrics.jsonl";
  runs[1].path = "/r/lr2/run/metrics.jsonl";
  runs[2].path = "/r/other/metrics.jsonl";
  runs[3].path = "/r/lr1/run/metrics.jsonl";  // the same run twice
  for (auto& r : runs) r.name = run_name(r.path);
  make_names_unique(runs);
  EXPECT_EQ(runs[0].name, "lr1/run");
  EXPECT_EQ(runs[1].name, "lr2/run");
  EXPECT_EQ(runs[2].name, "other");
  EXPECT_EQ(runs[3].name, "lr1/run (2)");
}

}  // namespace
}  // namespace driftless::train
