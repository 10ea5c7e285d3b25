// Reading a run's metrics.jsonl (README "Run configs"), written by the trainer: one line
// {step, loss, lr, grad_norm, tokens, tokens_per_second, mfu, step_seconds} per step (and the
// kernel cache's kernel_cache_* counters once run-time compiled kernels are used) and
// {step, val_loss} per evaluation. Used by `driftless plot` and the regress report's plot.
// MetricsWriter is the trainer's side: a failed write stops the run instead of losing lines.
#pragma once
#include <cstdint>
#include <fstream>
#include <iosfwd>
#include <string>
#include <vector>

namespace driftless::train {

// Appends lines to a metrics file, flushed one by one; a write that fails (a full disk)
// throws driftless::Error naming the file and the system's reason.
class MetricsWriter {
 public:
  void open(const std::string& path, bool append);
  void write(const std::string& line);

 private:
  std::string path_;
  std::ofstream out_;
};

struct MetricPoint {
  int64_t step = 0;
  double value = 0;
};

struct RunMetrics {
  std::string name;  // the legend label: the run directory's name unless given
  std::string path;  // the metrics.jsonl read
  // Finite values in order of step. A step logged twice (a resumed run appends to the file)
  // keeps its last value.
  std::vector<MetricPoint> loss, val_loss, tokens_per_second;
  int64_t non_finite = 0;  // loss / val_loss values written as null, NaN or inf (left out)
  bool empty() const { return loss.empty() && val_loss.empty() && tokens_per_second.empty(); }
};

// Parses metrics lines; `source` names the file in errors ("[plot] F:LINE: ..."). Blank
// lines and objects with neither loss nor val_loss are skipped; anything else that is not a
// JSON object with an integer step and numeric (or null) values is an error.
RunMetrics parse_metrics(std::istream& in, const std::string& source);

// Reads RUN_DIR/metrics.jsonl (or a metrics file named directly). Errors when the file is
// missing or malformed, or when it holds no finite data point.
RunMetrics read_run_metrics(const std::string& run_dir_or_file);

// The run directory an argument names (absolute): the directory itself, or a metrics file's.
std::string run_directory(const std::string& run_dir_or_file);
// The legend name of a run: its directory's name ("runs/regress/sdp2/" -> "sdp2").
std::string run_name(const std::string& run_dir_or_file);
// Makes equal names distinct by prefixing parent directories ("a/run", "b/run").
void make_names_unique(std::vector<RunMetrics>& runs);

}  // namespace driftless::train
