// The config's modifier expressions under hostile input: a score_mod_params name is checked
// where the config is read (it reaches generated GPU code), and an expression's errors name
// the key and the column rather than crashing or reporting an internal error.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "engine/core/error.h"
#include "tests/error_of.h"
#include "train/config.h"

namespace driftless::train {
namespace {

using testing::error_of;

// A YAML config whose model has `score_mod` and one parameter named `name` (a JSON string,
// so any bytes fit).
std::string config_with(const std::string& score_mod, const std::string& name) {
  return "model: {n_embd: 64, n_head: 4, score_mod: '" + score_mod +
         "',\n        score_mod_params: {\"" + name + "\": {shape: [heads], init: 0.5}}}\n";
}

TEST(ConfigExpr, ParameterNamesThatWouldInjectCodeAreRefused) {
  for (const std::string name :
       {"a;\\n#include \\\"/etc/hostname\\\"\\nconst float* p_b", "a;\\n#define dl_abs(x) 0\\n//",
        "int", "__launch_bounds__", "dl_abs", "9lives", "two words"}) {
    SCOPED_TRACE(name);
    const std::string err = error_of([&] { parse_config_text(config_with("score", name)); });
    EXPECT_NE(err.find("model.score_mod_params"), std::string::npos) << err;
    EXPECT_NE(err.find("parameter name"), std::string::npos) << err;
    EXPECT_EQ(err.find('\n', err.find("parameter name")), std::string::npos) << err;
  }
  EXPECT_EQ(
      error_of([] { parse_config_text(config_with("score - slope[h] * abs(q - k)", "slope")); }),
      "");
}

TEST(ConfigExpr, ExpressionErrorsNameTheColumnNotAnInternalError) {
  for (const auto& [expr, want] : std::vector<std::pair<std::string, std::string>>{
           {"score + 1e999", "out of range at column 9"},
           {"score / 0", "division by zero at column 7"},
           {"score + sqrt(-1.0)", "NaN for every pair; a score must be finite at column 9"},
           {"score + slope[clamp(h, 3, 0)]", "lower bound"}}) {
    SCOPED_TRACE(expr);
    const std::string err = error_of([&] { parse_config_text(config_with(expr, "slope")); });
    EXPECT_NE(err.find("[score_mod]"), std::string::npos) << err;
    EXPECT_NE(err.find(want), std::string::npos) << err;
    EXPECT_EQ(err.find("internal error"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace driftless::train
