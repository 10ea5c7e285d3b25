// Regression of batch layouts against a baseline (`driftless regress`):
// every layout of the same global batch runs with tensor logs, and every logged tensor is
// compared with the drift metric against per-class, per-dtype tolerances, and so are the
// training and validation losses of metrics.jsonl (as forward outputs). The first failing
// tensor in execution order is where the drift is born.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "train/drift.h"
#include "train/tensor_log.h"

namespace driftless::train {

struct RegressLayout {
  std::string name;
  int64_t ranks = 1;                              // > 1: launched with mpirun
  std::vector<std::string> overrides;             // key.path=value for `driftless train`
  std::string baseline = "simple";                // layout compared against; "none": reference only
  std::map<std::string, std::string> env;         // extra environment (test-only faults)
  bool exact = false;  // must equal its baseline bit for bit (tolerance 0, no overrides)
};

// A per-tensor exception to the class tolerance; the reason is required and reported.
struct ToleranceOverride {
  std::string pattern;  // ECMAScript regex over the logged tensor name
  double tolerance = 0;
  std::string reason;
  std::string dtype;  // applies to comparisons of this dtype only ("": every dtype)
};

// The overrides that apply to comparisons in `dtype`.
std::vector<ToleranceOverride> overrides_for(const std::string& dtype,
                                             const std::vector<ToleranceOverride>& all);

// Tolerances of a dtype derived from a measured drift instead of written down:
// tolerance[class] = factor x the largest rms_rel of that class (tensors with an override
// excluded) of layout `layout` against its baseline. The derivation is printed in the report.
struct DerivedTolerances {
  std::string dtype;   // whose tolerances are derived (bf16)
  std::string layout;  // e.g. the 1-GPU bf16 run, whose baseline is the f32 run
  double factor = 2.0;
};

struct RegressConfig {
  std::string run_config;    // the run config every layout starts from (absolute path)
  int64_t steps = 2;
  std::vector<int64_t> log_steps = {0, 1};
  std::string output_dir = "runs/regress";
  double epsilon = 1e-12;
  // tolerances[dtype][kind]: rms_rel limit; kinds forward, backward, param_grad, param.
  std::map<std::string, std::map<std::string, double>> tolerances;
  std::vector<ToleranceOverride> tolerance_overrides;
  std::vector<DerivedTolerances> derived_tolerances;
  std::vector<RegressLayout> layouts;  // "simple" first, added when absent
};

// Strict loading through the run config's schema machinery (regress_config.cpp): unknown
// keys, wrong types and bad values with their key paths, in one message. `only` keeps those
// layouts, the baselines they need and the layouts tolerances derive from.
RegressConfig load_regress_config(const std::string& path, const std::vector<std::string>& only);
// A Markdown table of every key of the regression config (`driftless regress --reference`).
std::string regress_config_reference();

struct TensorDrift {
  std::string name, kind;
  int64_t step = 0, order = 0;
  Drift drift;
  double tolerance = 0;
  std::string tolerance_reason;  // set when a tolerance override applies
  bool pass = true;
};

struct LayoutResult {
  std::string name, baseline;
  std::string run_dir, baseline_dir;  // the compared run directories
  int64_t ranks = 1;
  bool ran = true;             // the run itself succeeded
  std::string error;           // why it did not run / compare
  std::vector<TensorDrift> tensors;  // in (step, execution order)
  bool pass() const;
  const TensorDrift* worst() const;
  const TensorDrift* first_failure() const;
  // Largest rms_rel of each class (forward, backward, ...), tensors with an override aside.
  std::map<std::string, double> worst_by_class() const;
};

// Compares the tensor logs of two run directories at the given steps, then every loss and
// validation loss of the reference's metrics.jsonl (when it has one) with the test run's.
LayoutResult compare_runs(const std::string& reference_dir, const std::string& test_dir,
                          const std::vector<int64_t>& steps,
                          const std::map<std::string, double>& tolerance, double epsilon,
                          const std::vector<ToleranceOverride>& overrides = {});
// The band of an outside reference: each tensor of `r` (test against reference A) gets the
// tolerance factor x its rms_rel in `band` (a second run of the reference against A, such as
// PyTorch in fp32 against PyTorch in bf16: the noise the reference itself carries), never less
// than the tolerance it had, and is judged again. Tensors `band` lacks keep theirs.
void apply_band(LayoutResult& r, const LayoutResult& band, double factor);
// Steps for which both runs have tensor logs.
std::vector<int64_t> common_log_steps(const std::string& a, const std::string& b);

std::string format_table(const std::vector<LayoutResult>& results);
void write_report_json(const std::string& path, const std::vector<LayoutResult>& results);

// The loss curves shown with a report: the page they are on (linked, relative to the report)
// and the SVG embedded in it; empty when no compared run has usable metrics.
struct ReportPlot {
  std::string href, svg;
  std::vector<std::string> left_out;  // runs whose metrics could not be plotted, and why
};
// Writes the overlaid loss plot (metrics_plot.h) of every run directory of the results,
// baselines first, to `path` (an .html page); runs without usable metrics are left out and
// listed.
ReportPlot write_comparison_plot(const std::string& path, const std::vector<LayoutResult>& results,
                                 const std::string& title);
// Writes report.html at `path` and, beside it, loss.html (write_comparison_plot), which the
// report embeds and links.
void write_report_html(const std::string& path, const std::string& title,
                       const std::vector<LayoutResult>& results);

}  // namespace driftless::train
