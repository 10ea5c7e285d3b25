// compare_runs on the losses of metrics.jsonl (train/regress.h): every loss and
// validation loss of the reference is compared with the test run's, as forward outputs; a
// wrong or missing one fails the layout.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "tests/test_paths.h"
#include "train/regress.h"

namespace driftless::train {
namespace {

// A run directory holding only metrics.jsonl: losses of steps 0 and 1, val_loss after 1.
std::string run_dir(const std::string& root, const std::string& name, double val_loss,
                    bool with_val = true) {
  const std::string dir = root + "/" + name;
  std::filesystem::create_directories(dir);
  std::ofstream f(dir + "/metrics.jsonl");
  f.precision(17);
  f << "{\"step\": 0, \"loss\": 4.25, \"lr\": 0.001}\n{\"step\": 1, \"loss\": 4.125}\n";
  if (with_val) f << "{\"step\": 1, \"val_loss\": " << val_loss << "}\n";
  return dir;
}

TEST(RegressCompare, LossesAndValidationLossAreCompared) {
  const std::string root = testing::scratch_dir();
  const std::map<std::string, double> tol = {{"forward", 1e-5}};
  const std::string ref = run_dir(root, "ref", 4.0);

  LayoutResult same = compare_runs(ref, run_dir(root, "same", 4.0 * (1 + 1e-7)), {}, tol, 1e-12);
  ASSERT_EQ(same.tensors.size(), 3u);
  EXPECT_TRUE(same.pass());
  EXPECT_EQ(same.tensors[0].name, "metrics/loss");
  EXPECT_EQ(same.tensors[2].name, "metrics/val_loss");
  EXPECT_EQ(same.tensors[2].step, 1);
  EXPECT_EQ(same.tensors[2].kind, "forward");
  EXPECT_NEAR(same.tensors[2].drift.rms_rel, 1e-7, 1e-9);

  // P ranks each adding the whole validation loss: twice the reference on 2 ranks.
  LayoutResult doubled = compare_runs(ref, run_dir(root, "doubled", 8.0), {}, tol, 1e-12);
  EXPECT_FALSE(doubled.pass());
  ASSERT_NE(doubled.first_failure(), nullptr);
  EXPECT_EQ(doubled.first_failure()->name, "metrics/val_loss");
  EXPECT_NEAR(doubled.first_failure()->drift.rms_rel, 1.0, 1e-12);

  LayoutResult missing =
      compare_runs(ref, run_dir(root, "missing", 0, /*with_val=*/false), {}, tol, 1e-12);
  EXPECT_FALSE(missing.pass());
  EXPECT_NE(missing.error.find("metrics/val_loss of step 1 missing"), std::string::npos)
      << missing.error;

  // Without metrics in the reference there is nothing to compare (tensor logs only).
  const std::string bare = root + "/bare";
  std::filesystem::create_directories(bare);
  EXPECT_TRUE(compare_runs(bare, ref, {}, tol, 1e-12).tensors.empty());
}

// apply_band: each tensor's tolerance becomes factor x its drift in the band run, when
// larger than its own; a tensor the band run lacks keeps its tolerance.
TEST(RegressCompare, TheBandWidensEachTensorsTolerance) {
  auto tensor = [](const std::string& name, int64_t step, double rms_rel) {
    TensorDrift t;
    t.name = name;
    t.kind = "forward";
    t.step = step;
    t.drift.rms_rel = rms_rel;
    t.tolerance = 1e-5;
    t.pass = rms_rel <= 1e-5;
    return t;
  };
  LayoutResult r, band;
  r.tensors = {tensor("a", 0, 1e-3), tensor("b", 0, 1e-3), tensor("c", 0, 1e-6),
               tensor("a", 1, 1e-3), tensor("d", 0, 1e-3)};
  band.tensors = {tensor("a", 0, 1e-3), tensor("b", 0, 5e-4), tensor("c", 0, 1e-9),
                  tensor("a", 1, 1e-4)};
  EXPECT_FALSE(r.pass());
  apply_band(r, band, 1.5);
  EXPECT_DOUBLE_EQ(r.tensors[0].tolerance, 1.5e-3);
  EXPECT_TRUE(r.tensors[0].pass);  // within 1.5 x its band
  EXPECT_DOUBLE_EQ(r.tensors[1].tolerance, 7.5e-4);
  EXPECT_FALSE(r.tensors[1].pass);                 // twice its band
  EXPECT_DOUBLE_EQ(r.tensors[2].tolerance, 1e-5);  // the class tolerance is the floor
  EXPECT_TRUE(r.tensors[2].pass);
  EXPECT_FALSE(r.tensors[3].pass);                 // the band of step 1, not step 0's
  EXPECT_DOUBLE_EQ(r.tensors[4].tolerance, 1e-5);  // not in the band run
  EXPECT_FALSE(r.tensors[4].pass);
  ASSERT_NE(r.first_failure(), nullptr);
  EXPECT_EQ(r.first_failure()->name, "b");
}

}  // namespace
}  // namespace driftless::train
