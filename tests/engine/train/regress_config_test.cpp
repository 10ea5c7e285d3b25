// The regression config (engine/train/regress.h): every shipped regress config loads;
// tolerance overrides can be limited to one dtype; derived tolerances name a layout that
// exists and has a baseline, and --only keeps that layout.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/train/regress.h"
#include "tests/test_paths.h"

namespace driftless::train {
namespace {

namespace fs = std::filesystem;

std::string write_config(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / "dl_regress_config_test";
  fs::create_directories(dir);
  std::ofstream(dir / "run.yaml") << "training: {steps: 2}\n";
  std::ofstream(dir / name) << "run: run.yaml\n" << text;
  return (dir / name).string();
}

TEST(RegressConfig, ShippedConfigsLoad) {
  int n = 0;
  for (const auto& e :
       fs::directory_iterator(fs::path(driftless::testing::source_dir()) / "configs/regress")) {
    EXPECT_NO_THROW(load_regress_config(e.path().string(), {})) << e.path();
    ++n;
  }
  EXPECT_GE(n, 4);
}

TEST(RegressConfig, DtypeOverridesAndDerivedTolerances) {
  const std::string path = write_config("ok.yaml", R"(
derive_tolerances:
  bf16: {from: one_bf16, factor: 3}
tolerance_overrides:
  - {tensor: 'a', tolerance: 0.1, reason: r1, dtype: bf16}
  - {tensor: 'b', tolerance: 0.2, reason: r2}
layouts:
  - {name: one_bf16, set: {precision.compute: bf16}}
  - {name: two, baseline: one_bf16}
)");
  const RegressConfig c = load_regress_config(path, {"two"});
  ASSERT_EQ(c.derived_tolerances.size(), 1u);
  EXPECT_EQ(c.derived_tolerances[0].layout, "one_bf16");
  EXPECT_EQ(c.derived_tolerances[0].factor, 3.0);
  std::vector<std::string> names;
  for (const auto& l : c.layouts) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"simple", "one_bf16", "two"}));  // kept for deriving
  EXPECT_EQ(overrides_for("bf16", c.tolerance_overrides).size(), 2u);
  const auto f32 = overrides_for("f32", c.tolerance_overrides);
  ASSERT_EQ(f32.size(), 1u);
  EXPECT_EQ(f32[0].pattern, "b");
}

TEST(RegressConfig, BadDerivationAndOverrideDtypeAreErrors) {
  const std::string path = write_config("bad.yaml", R"(
derive_tolerances:
  bf16: {from: missing, factor: 2}
  f16: {from: simple}
tolerance_overrides:
  - {tensor: 'a', tolerance: 0.1, reason: r, dtype: f16, colour: red}
)");
  try {
    load_regress_config(path, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("derive_tolerances.bf16.from: 'missing'"), std::string::npos) << m;
    EXPECT_NE(m.find("derive_tolerances.f16: dtype must be f32 or bf16"), std::string::npos) << m;
    EXPECT_NE(m.find("tolerance_overrides[0].dtype: must be f32 or bf16"), std::string::npos) << m;
    EXPECT_NE(m.find("tolerance_overrides[0].colour: unknown key"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace driftless::train
