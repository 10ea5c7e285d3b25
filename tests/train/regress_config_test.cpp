// The regression config (train/regress.h): every shipped regress config loads;
// tolerance overrides can be limited to one dtype; derived tolerances name a layout that
// exists and has a baseline, and --only keeps that layout; problems name their key path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/test_paths.h"
#include "train/regress.h"

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
    EXPECT_NE(m.find("derive_tolerances.f16.from: unknown key (did you mean "
                     "derive_tolerances.bf16.from?)"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("tolerance_overrides[0].dtype: 'f16' is not one of: f32, bf16"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("tolerance_overrides[0].colour: unknown key"), std::string::npos) << m;
  }
}

// The regression config goes through the run config's schema machinery: unknown keys with
// a suggestion, wrong types and ranges with their key paths inside lists of records.
TEST(RegressConfig, SchemaErrorsNameTheKeyPath) {
  const std::string path = write_config("schema.yaml", R"(
steps: two
epsilon: 5
tolerances:
  f32: {forwad: 1.0e-5}
layouts:
  - {name: a, rank: 2}
  - {name: b, ranks: 100, set: [1, 2]}
)");
  try {
    load_regress_config(path, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* want :
         {"steps: expected an integer, got 'two'", "epsilon: value 5 out of range [0, 1]",
          "tolerances.f32.forwad: unknown key (did you mean tolerances.f32.forward?)",
          "layouts[0].rank: unknown key (did you mean layouts[0].ranks?)",
          "layouts[1].ranks: value 100 out of range [1, 64]",
          "layouts[1].set: expected a mapping of keys"})
      EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
  }
}

TEST(RegressConfig, ReadsLayoutsAndTolerances) {
  const std::string path = write_config("read.yaml", R"(
steps: 3
log_steps: [2]
tolerances:
  bf16: {forward: 0.02}
layouts:
  - {name: cp2, ranks: 2, set: {distributed.context_parallel.size: 2, run.tensor_logs.steps: [0, 2]}, env: {A: "1"}}
)");
  const RegressConfig c = load_regress_config(path, {});
  EXPECT_EQ(c.steps, 3);
  EXPECT_EQ(c.log_steps, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.tolerances.at("f32").at("param"), 1e-5);
  // A dtype's unwritten classes stay absent (derive_tolerances reads them as no ceiling).
  EXPECT_EQ(c.tolerances.at("bf16"), (std::map<std::string, double>{{"forward", 0.02}}));
  ASSERT_EQ(c.layouts.size(), 2u);
  EXPECT_EQ(c.layouts[0].name, "simple");
  const RegressLayout& l = c.layouts[1];
  EXPECT_EQ(l.ranks, 2);
  EXPECT_EQ(l.baseline, "simple");
  EXPECT_EQ(l.overrides, (std::vector<std::string>{"distributed.context_parallel.size=2",
                                                   "run.tensor_logs.steps=[0, 2]"}));
  EXPECT_EQ(l.env.at("A"), "1");
  EXPECT_NE(regress_config_reference().find("| `layouts[].ranks` | int | `1` | 1 .. 64 |"),
            std::string::npos);
}

}  // namespace
}  // namespace driftless::train
