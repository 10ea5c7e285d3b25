// The regression config's schema and its loading (regress.h): the YAML is read through the
// schema machinery of the run config (schema.h), so unknown keys, wrong types and
// out-of-range values are refused with their key paths, and `driftless regress
// --reference` prints the keys from the same schema.
#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/regular_file.h"
#include "train/regress.h"
#include "train/schema.h"

namespace driftless::train {

namespace fs = std::filesystem;

namespace {

constexpr double kBig = 1e15;

// One dtype's tolerances as the YAML writes them.
struct ClassTolerances {
  double forward = 0, backward = 0, param_grad = 0, param = 0;
};

struct Derivation {
  std::string from;
  double factor = 2.0;
};

struct LayoutEntry {
  std::string name;
  int64_t ranks = 1;
  std::string baseline = "simple";
  std::map<std::string, std::string> set;
  std::map<std::string, std::string> env;
  bool exact = false;
};

// The regression config as written; load_regress_config turns it into a RegressConfig.
struct RegressFile {
  std::string run;
  int64_t steps = 2;
  std::vector<int64_t> log_steps = {0, 1};
  std::string output_dir = "runs/regress";
  double epsilon = 1e-12;
  ClassTolerances f32{1e-5, 1e-5, 1e-5, 1e-5};
  ClassTolerances bf16;
  std::vector<ToleranceOverride> tolerance_overrides;
  Derivation derive_f32, derive_bf16;
  std::vector<LayoutEntry> layouts;
};

constexpr const char* kClasses[4] = {"forward", "backward", "param_grad", "param"};
constexpr const char* kF32Paths[4] = {"tolerances.f32.forward", "tolerances.f32.backward",
                                      "tolerances.f32.param_grad", "tolerances.f32.param"};
constexpr const char* kBf16Paths[4] = {"tolerances.bf16.forward", "tolerances.bf16.backward",
                                       "tolerances.bf16.param_grad", "tolerances.bf16.param"};

void tolerance_fields(const char* const (&paths)[4], ClassTolerances& t, const FieldVisitor& v) {
  v(Field{paths[0], "rms_rel limit of forward outputs and losses", 0, 1e6}, &t.forward);
  v(Field{paths[1], "rms_rel limit of the gradients flowing into each layer", 0, 1e6}, &t.backward);
  v(Field{paths[2], "rms_rel limit of parameter gradients", 0, 1e6}, &t.param_grad);
  v(Field{paths[3], "rms_rel limit of parameters after the update", 0, 1e6}, &t.param);
}

// One line per key, as in config_schema.cpp: the table reads as the reference does.
// clang-format off
void visit_regress_schema(RegressFile& c, const FieldVisitor& v) {
  v(Field{"run", "the run config every layout starts from (relative to this file); required"}, &c.run);
  v(Field{"steps", "training steps of every layout", 1, kBig}, &c.steps);
  v(Field{"log_steps", "steps whose tensors are logged and compared (each in [0, steps))", 0, kBig}, &c.log_steps);
  v(Field{"output_dir", "where each layout's run directory and the reports go (-o overrides it)"}, &c.output_dir);
  v(Field{"epsilon", "eps of the drift metric's scale sqrt(mean(r^2) + eps^2)", 0, 1}, &c.epsilon);
  tolerance_fields(kF32Paths, c.f32, v);
  tolerance_fields(kBf16Paths, c.bf16, v);
  const RecordList overrides = records(c.tolerance_overrides, [](ToleranceOverride& o, const FieldVisitor& w) {
    w(Field{"tensor", "ECMAScript regex matched against the whole logged tensor name"}, &o.pattern);
    w(Field{"tolerance", "its rms_rel limit (> 0)", 0, 1e6}, &o.tolerance);
    w(Field{"reason", "why this tensor needs another tolerance (required, printed with the report)"}, &o.reason);
    w(Field{"dtype", "the comparisons it applies to (absent: every dtype)", 0, 0, {"f32", "bf16"}}, &o.dtype);
  });
  v(Field{"tolerance_overrides", "per-tensor exceptions to the class tolerances"}, &overrides);
  v(Field{"derive_tolerances.f32.from", "derive the f32 tolerances from this layout's drift against its baseline"}, &c.derive_f32.from);
  v(Field{"derive_tolerances.f32.factor", "derived f32 tolerance = factor x the largest rms_rel of each class", 0, 1e6}, &c.derive_f32.factor);
  v(Field{"derive_tolerances.bf16.from", "derive the bf16 tolerances from this layout's drift against its baseline (floor: the f32 value; ceiling: the written bf16 value)"}, &c.derive_bf16.from);
  v(Field{"derive_tolerances.bf16.factor", "derived bf16 tolerance = factor x the largest rms_rel of each class", 0, 1e6}, &c.derive_bf16.factor);
  const RecordList layouts = records(c.layouts, [](LayoutEntry& l, const FieldVisitor& w) {
    w(Field{"name", "the layout's name (letters, digits, _ . -); `simple` is the reference, added when absent"}, &l.name);
    w(Field{"ranks", "processes; > 1 runs under mpirun -np N", 1, 64}, &l.ranks);
    w(Field{"baseline", "the layout it is compared against; none: a reference only"}, &l.baseline);
    w(Field{"set", "run config overrides (key.path: value)"}, &l.set);
    w(Field{"env", "extra environment of the run (test-only faults)"}, &l.env);
    w(Field{"exact", "every logged tensor and the loss must equal the baseline's bit for bit (tolerance 0, no overrides): for changes that must not move a bit, such as training.recompute"}, &l.exact);
  });
  v(Field{"layouts", "the layouts run and compared"}, &layouts);
}
// clang-format on

}  // namespace

std::string regress_config_reference() {
  RegressFile defaults;
  return schema_reference([&](const FieldVisitor& v) { visit_regress_schema(defaults, v); });
}

RegressConfig load_regress_config(const std::string& path, const std::vector<std::string>& only) {
  DL_CHECK(fs::exists(path), "regress", "config " << path << " does not exist");
  YAML::Node root;
  try {
    root = YAML::Load(read_regular_file(path, "regress", size_t(64) << 20));
  } catch (const YAML::Exception& e) {
    DL_FAIL("regress", path << ": invalid YAML: " << e.what());
  }
  check_unique_keys(root, path);
  std::vector<std::string> errors;
  auto err = [&](const std::string& e) { errors.push_back(e); };
  RegressFile f;
  std::set<std::string> given;
  if (root.IsMap())
    given = read_schema(
        root, [&](const FieldVisitor& v) { visit_regress_schema(f, v); }, errors);
  else
    err("the top level must be a mapping of keys");

  RegressConfig c;
  const fs::path base = fs::path(path).parent_path();
  if (!f.run.empty())
    c.run_config = fs::absolute(base / f.run).string();
  else
    err("run: required (the run config every layout starts from)");
  if (!c.run_config.empty() && !fs::exists(c.run_config))
    err("run: " + c.run_config + " does not exist");
  c.steps = f.steps;
  c.log_steps = f.log_steps;
  c.output_dir = f.output_dir;
  c.epsilon = f.epsilon;
  for (int64_t s : c.log_steps)
    if (s >= c.steps) err("log_steps: step " + std::to_string(s) + " outside [0, steps)");
  auto given_under = [&](const std::string& prefix) {
    return std::any_of(given.begin(), given.end(),
                       [&](const std::string& p) { return p.rfind(prefix, 0) == 0; });
  };
  // f32 has defaults; another dtype has the classes it writes (derive_tolerances takes a
  // written value as its ceiling, an absent one as none).
  const double f32_values[4] = {f.f32.forward, f.f32.backward, f.f32.param_grad, f.f32.param};
  const double bf16_values[4] = {f.bf16.forward, f.bf16.backward, f.bf16.param_grad, f.bf16.param};
  for (int k = 0; k < 4; ++k) {
    c.tolerances["f32"][kClasses[k]] = f32_values[k];
    if (given.count(kBf16Paths[k])) c.tolerances["bf16"][kClasses[k]] = bf16_values[k];
  }
  for (size_t i = 0; i < f.tolerance_overrides.size(); ++i) {
    const ToleranceOverride& t = f.tolerance_overrides[i];
    const std::string where = "tolerance_overrides[" + std::to_string(i) + "]";
    try {
      std::regex check(t.pattern);
    } catch (const std::regex_error& e) {
      err(where + ".tensor: not a regex: " + e.what());
    }
    if (t.pattern.empty() || t.tolerance <= 0 || t.reason.empty())
      err(where + ": needs tensor (regex), tolerance > 0 and a written reason");
  }
  c.tolerance_overrides = f.tolerance_overrides;
  for (const auto& [dtype, d] :
       {std::pair<std::string, const Derivation&>{"f32", f.derive_f32},
        std::pair<std::string, const Derivation&>{"bf16", f.derive_bf16}}) {
    if (!given_under("derive_tolerances." + dtype + ".")) continue;
    if (d.from.empty() || d.factor <= 0)
      err("derive_tolerances." + dtype + ": needs from (a layout) and factor > 0");
    c.derived_tolerances.push_back({dtype, d.from, d.factor});
  }
  std::set<std::string> names;
  for (size_t i = 0; i < f.layouts.size(); ++i) {
    const LayoutEntry& l = f.layouts[i];
    const std::string where = "layouts[" + std::to_string(i) + "]";
    if (!std::regex_match(l.name, std::regex("[A-Za-z0-9_.-]+")))
      err(where + ".name: '" + l.name + "' must be letters, digits, _ . -");
    if (!names.insert(l.name).second) err(where + ".name: '" + l.name + "' appears twice");
    RegressLayout layout{l.name, l.ranks, {}, l.baseline, l.env, l.exact};
    for (const auto& [key, value] : l.set) layout.overrides.push_back(key + "=" + value);
    c.layouts.push_back(layout);
  }
  if (!names.count("simple"))
    c.layouts.insert(c.layouts.begin(), RegressLayout{"simple", 1, {}, "none", {}});
  for (auto& l : c.layouts)
    if (l.name == "simple") l.baseline = "none";
  for (const auto& l : c.layouts)
    if (l.baseline != "none" && !names.count(l.baseline) && l.baseline != "simple")
      err("layout " + l.name + ": baseline '" + l.baseline + "' is not a layout");
  for (const auto& d : c.derived_tolerances)
    if (!names.count(d.layout) || d.layout == "simple")
      err("derive_tolerances." + d.dtype + ".from: '" + d.layout +
          "' must be a layout with a baseline");
  if (!only.empty()) {
    // Keep the chosen layouts, the baselines they need and the layouts tolerances derive from.
    std::set<std::string> keep(only.begin(), only.end());
    for (const auto& d : c.derived_tolerances) keep.insert(d.layout);
    for (const auto& o : only)
      if (!names.count(o) && o != "simple") err("--only: no layout named '" + o + "'");
    bool grew = true;
    while (grew) {
      grew = false;
      for (const auto& l : c.layouts)
        if (keep.count(l.name) && l.baseline != "none" && keep.insert(l.baseline).second)
          grew = true;
    }
    std::vector<RegressLayout> kept;
    for (const auto& l : c.layouts)
      if (keep.count(l.name)) kept.push_back(l);
    c.layouts = kept;
  }
  if (!errors.empty()) {
    std::ostringstream os;
    os << errors.size() << " problem" << (errors.size() > 1 ? "s" : "") << " in " << path << ":";
    for (const auto& e : errors) os << "\n  - " << e;
    DL_FAIL("regress", os.str());
  }
  return c;
}

}  // namespace driftless::train
