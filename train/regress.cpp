// Tensor-log comparison and the text/JSON reports of a regression (regress.h); the config
// is read in regress_config.cpp.
#include "train/regress.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "train/metrics_file.h"

namespace driftless::train {

namespace fs = std::filesystem;

bool LayoutResult::pass() const {
  if (!ran) return false;
  return std::all_of(tensors.begin(), tensors.end(), [](const TensorDrift& t) { return t.pass; });
}

const TensorDrift* LayoutResult::worst() const {
  const TensorDrift* w = nullptr;
  for (const auto& t : tensors) {
    const double ratio = t.drift.rms_rel / std::max(t.tolerance, 1e-300);
    if (!w || ratio > w->drift.rms_rel / std::max(w->tolerance, 1e-300)) w = &t;
  }
  return w;
}

const TensorDrift* LayoutResult::first_failure() const {
  for (const auto& t : tensors)
    if (!t.pass) return &t;
  return nullptr;
}

std::vector<int64_t> common_log_steps(const std::string& a, const std::string& b) {
  std::vector<int64_t> steps;
  const std::regex pattern(R"(step_(\d+)\.json)");
  const fs::path da = fs::path(a) / "tensor_logs";
  if (!fs::exists(da)) return steps;
  for (const auto& e : fs::directory_iterator(da)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, pattern)) continue;
    if (fs::exists(fs::path(b) / "tensor_logs" / name)) steps.push_back(std::stoll(m[1]));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::map<std::string, double> LayoutResult::worst_by_class() const {
  std::map<std::string, double> worst;
  for (const auto& t : tensors)
    if (t.tolerance_reason.empty()) worst[t.kind] = std::max(worst[t.kind], t.drift.rms_rel);
  return worst;
}

std::vector<ToleranceOverride> overrides_for(const std::string& dtype,
                                             const std::vector<ToleranceOverride>& all) {
  std::vector<ToleranceOverride> out;
  for (const auto& o : all)
    if (o.dtype.empty() || o.dtype == dtype) out.push_back(o);
  return out;
}

namespace {

// The losses both runs report in metrics.jsonl, compared as forward outputs: the training
// loss of every step and every validation loss (evaluation has no tensor log, so a wrong
// validation loss shows only here). A value the test run lacks fails.
void compare_losses(const std::string& reference_dir, const std::string& test_dir, double epsilon,
                    const std::function<void(TensorDrift&)>& set_tolerance, LayoutResult& r) {
  RunMetrics ref, test;
  try {
    ref = read_run_metrics(reference_dir);
  } catch (const Error&) {  // no metrics.jsonl, or no finite loss: nothing to compare
    return;
  }
  try {
    test = read_run_metrics(test_dir);
  } catch (const Error&) {  // missing, malformed or without a finite value: nothing matches
  }
  int64_t order = 0;
  for (const auto& t : r.tensors) order = std::max(order, t.order + 1);
  auto compare = [&](const char* name, const std::vector<MetricPoint>& want,
                     const std::vector<MetricPoint>& got) {
    for (const MetricPoint& p : want) {
      TensorDrift d;
      d.name = std::string("metrics/") + name;
      d.kind = "forward";
      d.step = p.step;
      d.order = order;
      set_tolerance(d);
      const auto it = std::find_if(got.begin(), got.end(),
                                   [&](const MetricPoint& g) { return g.step == p.step; });
      if (it == got.end()) {
        d.drift.rms_rel = d.drift.max_rel = std::numeric_limits<double>::infinity();
        d.drift.finite = false;
        d.pass = false;
        r.error = d.name + " of step " + std::to_string(p.step) + " missing in " + test_dir;
      } else {
        d.drift = drift(Tensor::from_vector<double>({p.value}),
                        Tensor::from_vector<double>({it->value}), epsilon);
        d.pass = d.drift.finite && d.drift.rms_rel <= d.tolerance;
      }
      r.tensors.push_back(d);
    }
  };
  compare("loss", ref.loss, test.loss);
  compare("val_loss", ref.val_loss, test.val_loss);
  // Each step's losses after its tensors: the first failure stays in execution order.
  std::stable_sort(r.tensors.begin(), r.tensors.end(),
                   [](const TensorDrift& a, const TensorDrift& b) { return a.step < b.step; });
}

}  // namespace

LayoutResult compare_runs(const std::string& reference_dir, const std::string& test_dir,
                          const std::vector<int64_t>& steps,
                          const std::map<std::string, double>& tolerance, double epsilon,
                          const std::vector<ToleranceOverride>& overrides) {
  LayoutResult r;
  r.run_dir = test_dir;
  r.baseline_dir = reference_dir;
  std::vector<std::regex> patterns;
  for (const auto& o : overrides) patterns.emplace_back(o.pattern);
  auto set_tolerance = [&](TensorDrift& d) {
    auto tol = tolerance.find(d.kind);
    d.tolerance = tol == tolerance.end() ? 0.0 : tol->second;
    for (size_t k = 0; k < overrides.size(); ++k)
      if (std::regex_match(d.name, patterns[k])) {
        d.tolerance = overrides[k].tolerance;
        d.tolerance_reason = overrides[k].reason;
      }
  };
  for (int64_t step : steps) {
    auto ref = load_tensor_log(reference_dir + "/tensor_logs", step);
    auto test = load_tensor_log(test_dir + "/tensor_logs", step);
    std::map<std::string, const LoggedTensor*> by_name;
    for (const auto& t : test) by_name[t.name] = &t;
    for (const auto& rt : ref) {
      TensorDrift d;
      d.name = rt.name;
      d.kind = rt.kind;
      d.step = step;
      d.order = rt.order;
      set_tolerance(d);
      auto it = by_name.find(rt.name);
      if (it == by_name.end() || it->second->value.shape() != rt.value.shape()) {
        d.drift.rms_rel = d.drift.max_rel = std::numeric_limits<double>::infinity();
        d.drift.finite = false;
        d.pass = false;
        r.error = "tensor " + rt.name + (it == by_name.end() ? " missing" : " has another shape") +
                  " in " + test_dir;
      } else {
        d.drift = drift(rt.value, it->second->value, epsilon);
        d.pass = d.drift.finite && d.drift.rms_rel <= d.tolerance;
      }
      r.tensors.push_back(d);
    }
  }
  compare_losses(reference_dir, test_dir, epsilon, set_tolerance, r);
  return r;
}

void apply_band(LayoutResult& r, const LayoutResult& band, double factor) {
  std::map<std::pair<int64_t, std::string>, double> noise;
  for (const auto& t : band.tensors)
    if (t.drift.finite) noise[{t.step, t.name}] = t.drift.rms_rel;
  for (auto& t : r.tensors) {
    const auto it = noise.find({t.step, t.name});
    if (it == noise.end()) continue;
    t.tolerance = std::max(t.tolerance, factor * it->second);
    t.pass = t.drift.finite && t.drift.rms_rel <= t.tolerance;
  }
}

namespace {
std::string sci(double v) {
  std::ostringstream os;
  if (std::isinf(v)) os << "inf";
  else os << std::scientific << std::setprecision(2) << v;
  return os.str();
}
std::string pad(const std::string& s, size_t w) { return s.size() >= w ? s : s + std::string(w - s.size(), ' '); }
}  // namespace

std::string format_table(const std::vector<LayoutResult>& results) {
  std::ostringstream os;
  os << pad("layout", 20) << pad("ranks", 6) << pad("status", 8) << pad("worst tensor", 52)
     << pad("rms_rel", 10) << "first failing tensor (execution order)\n";
  for (const auto& r : results) {
    std::string status = !r.ran ? "ERROR" : r.pass() ? "pass" : "FAIL";
    const TensorDrift* w = r.worst();
    const TensorDrift* f = r.first_failure();
    os << pad(r.name, 20) << pad(std::to_string(r.ranks), 6) << pad(status, 8)
       << pad(w ? "step " + std::to_string(w->step) + " " + w->name : "-", 52)
       << pad(w ? sci(w->drift.rms_rel) : "-", 10);
    if (!r.ran) os << r.error;
    else if (f) os << "step " << f->step << " " << f->name << " (" << sci(f->drift.rms_rel) << " > " << sci(f->tolerance) << ")";
    else os << "-";
    os << "\n";
    if (r.ran && !r.tensors.empty()) {
      os << pad("", 34) << "worst by class:";
      for (const auto& [kind, v] : r.worst_by_class()) os << " " << kind << " " << sci(v);
      os << "\n";
    }
  }
  std::map<std::string, std::string> used;  // reason -> tensors
  for (const auto& r : results)
    for (const auto& t : r.tensors)
      if (!t.tolerance_reason.empty() && used[t.tolerance_reason].find(t.name) == std::string::npos)
        used[t.tolerance_reason] += (used[t.tolerance_reason].empty() ? "" : ", ") + t.name;
  for (const auto& [reason, names] : used)
    os << "\ntolerance override on " << names << ":\n  " << reason << "\n";
  return os.str();
}

void write_report_json(const std::string& path, const std::vector<LayoutResult>& results) {
  nlohmann::json j = nlohmann::json::array();
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json("inf"); };
  for (const auto& r : results) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : r.tensors)
      tensors.push_back({{"name", t.name}, {"kind", t.kind}, {"step", t.step}, {"order", t.order},
                         {"rms", num(t.drift.rms)}, {"scale", num(t.drift.scale)},
                         {"rms_rel", num(t.drift.rms_rel)}, {"max_rel", num(t.drift.max_rel)},
                         {"tolerance", t.tolerance}, {"tolerance_reason", t.tolerance_reason},
                         {"pass", t.pass}});
    const TensorDrift* f = r.first_failure();
    const TensorDrift* w = r.worst();
    j.push_back({{"layout", r.name}, {"baseline", r.baseline}, {"ranks", r.ranks},
                 {"ran", r.ran}, {"error", r.error}, {"pass", r.pass()},
                 {"worst", w ? nlohmann::json{{"name", w->name}, {"step", w->step}, {"rms_rel", num(w->drift.rms_rel)}} : nlohmann::json()},
                 {"first_failure", f ? nlohmann::json{{"name", f->name}, {"step", f->step}, {"rms_rel", num(f->drift.rms_rel)}} : nlohmann::json()},
                 {"tensors", tensors}});
  }
  std::ofstream(path) << nlohmann::json{{"layouts", j}}.dump(1) << "\n";
}

}  // namespace driftless::train
