// `driftless plot RUN_DIR [RUN_DIR...]`: loss curves (train and validation loss, tokens/s)
// of runs' metrics.jsonl, overlaid one colour per run (with --difference, each run's loss
// minus the first run's), as a self-contained HTML page or SVG.
#include <iostream>

#include "apps/command.h"
#include "engine/core/error.h"
#include "train/metrics_plot.h"

namespace driftless::apps {
namespace {

struct PlotArgs {
  std::vector<std::string> runs;
  std::string output, title;
  bool difference = false;
};

int run_plot(const PlotArgs& a) {
  std::vector<train::RunMetrics> runs;
  for (const auto& dir : a.runs) runs.push_back(train::read_run_metrics(dir));
  train::make_names_unique(runs);
  const std::string out = a.output.empty() ? train::default_plot_path(a.runs) : a.output;
  const std::string title = !a.title.empty() ? a.title
                            : runs.size() == 1
                                ? "driftless plot: " + runs.front().name
                                : "driftless plot: " + std::to_string(runs.size()) + " runs";
  DL_CHECK(!a.difference || runs.size() >= 2, "plot",
           "expected two runs or more with --difference, got " << runs.size());
  train::write_metrics_plot(out, runs, title, a.difference);
  for (const auto& r : runs)
    std::cout << r.name << ": " << r.loss.size() << " losses, " << r.val_loss.size()
              << " validation losses" << (r.non_finite ? ", " : "")
              << (r.non_finite ? std::to_string(r.non_finite) + " non-finite left out" : "")
              << "\n";
  std::cout << "plot: " << out << "\n";
  return 0;
}

Registrar plot({"plot", "Plot the loss curves and tokens/s of one or more runs (HTML or SVG)",
                [](CLI::App& sub) {
                  auto a = std::make_shared<PlotArgs>();
                  sub.add_option("run_dirs", a->runs,
                                 "run directories (or their metrics.jsonl files)")
                      ->required();
                  sub.add_option("--output,-o", a->output,
                                 "FILE.html (page with a summary table) or FILE.svg (the "
                                 "charts alone); default RUN_DIR/loss.html for one run, "
                                 "plot.html beside the first run for several");
                  sub.add_option("--title", a->title, "heading of the page");
                  sub.add_flag("--difference", a->difference,
                               "a third chart: each later run's train and validation loss "
                               "minus the first run's, step by step");
                  sub.footer(
                      "Reads each run's metrics.jsonl (written by `driftless train`) and draws "
                      "two charts against the step: train loss as a solid line with validation "
                      "loss dashed and marked in the same colour, and training tokens/s (the "
                      "running mean). One colour per run, named by its directory. The page "
                      "needs no network: no scripts, styles inline. `driftless regress` writes "
                      "the same plot of every layout as loss.html beside report.html.\n"
                      "Examples:\n"
                      "  driftless plot runs/demo\n"
                      "  driftless plot runs/regress/*/ -o /tmp/layouts.html\n"
                      "  driftless plot runs/a runs/b -o curves.svg --title 'lr sweep'\n"
                      "  driftless plot runs/parity/torch_bf16 runs/parity/driftless --difference");
                  return std::function<int()>([a] { return run_plot(*a); });
                }});

}  // namespace
}  // namespace driftless::apps
