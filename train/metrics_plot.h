// Loss curves of one or more runs (`driftless plot`): train loss with validation loss
// dashed and marked in the same colour, and tokens/s, against the step; one colour per run.
// Written as one self-contained SVG, or an HTML page holding it plus a per-run summary.
#pragma once
#include <string>
#include <vector>

#include "train/metrics_file.h"
#include "train/svg_chart.h"

namespace driftless::train {

// The colour of the i-th run (a ten-colour palette, repeated).
std::string run_colour(size_t i);

// The charts of the plot: [0] loss (series "loss" and "val_loss"), [1] tokens/s (series
// "tokens_per_second"), stacked from y = top; one series per run that has the data. With
// `with_difference` and two runs or more, [2]: each later run's loss minus the first run's
// at the steps both logged (series "loss_difference", and "val_loss_difference" dashed and
// marked), e.g. driftless against an outside reference (docs/parity.md).
std::vector<LineChart> metrics_charts(const std::vector<RunMetrics>& runs, double top = 0,
                                      bool with_difference = false);

// The charts and the legend as one <svg> element; `title` ("" = none) heads it.
std::string metrics_svg(const std::vector<RunMetrics>& runs, const std::string& title,
                        bool with_difference = false);
// A complete HTML page (no scripts, styles inline, works offline): the SVG and a table of
// each run's steps, last and lowest loss and val_loss, and last tokens/s.
std::string metrics_html(const std::vector<RunMetrics>& runs, const std::string& title,
                         bool with_difference = false);

// Writes the SVG when `path` ends in .svg, the HTML page when it ends in .html or .htm
// (anything else is an error), through a temporary file and a rename.
void write_metrics_plot(const std::string& path, const std::vector<RunMetrics>& runs,
                        const std::string& title, bool with_difference = false);

// Where `driftless plot` writes without -o: RUN_DIR/loss.html for one run, else plot.html in
// the first run's parent directory.
std::string default_plot_path(const std::vector<std::string>& run_dirs);

}  // namespace driftless::train
