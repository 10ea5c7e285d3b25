// `driftless regress --config R` and `driftless report RUN_A RUN_B`: layouts against their
// baseline, tensor by tensor; terminal table, report.json and report.html. Exit status 1
// when anything fails.
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "apps/command.h"
#include "train/regress_runner.h"

namespace driftless::apps {
namespace {

std::string self_path() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("driftless") : p.string();
}

int finish(const std::vector<train::LayoutResult>& results, const std::string& dir,
           const std::string& title) {
  std::filesystem::create_directories(dir);
  std::cout << "\n" << train::format_table(results);
  train::write_report_json(dir + "/report.json", results);
  train::write_report_html(dir + "/report.html", title, results);
  bool ok = true;
  for (const auto& r : results) ok = ok && r.pass();
  std::cout << "\nreports: " << dir << "/report.json, " << dir << "/report.html\n"
            << (ok ? "all layouts match their baseline\n" : "DRIFT: some layouts fail\n");
  return ok ? 0 : 1;
}

struct RegressArgs {
  std::string config;
  std::vector<std::string> only;
  std::string output;
  bool reference = false;
};

int run_regress(const RegressArgs& a) {
  if (a.reference) {
    std::cout << train::regress_config_reference();
    return 0;
  }
  if (a.config.empty()) {
    std::cerr << "driftless regress: give --config FILE or --reference\n";
    return 1;
  }
  train::RegressConfig c = train::load_regress_config(a.config, a.only);
  if (!a.output.empty()) c.output_dir = a.output;
  std::cout << "driftless regress: " << c.layouts.size() << " layouts, " << c.steps
            << " steps, tensor logs at steps";
  for (auto s : c.log_steps) std::cout << " " << s;
  std::cout << ", output " << c.output_dir << "\n";
  train::RegressRunOptions o;
  o.driftless_binary = self_path();
  auto results = train::run_regression(c, o, std::cout);
  return finish(results, c.output_dir, "driftless regress: " + a.config);
}

Registrar regress({"regress",
                   "Run batch layouts against the single-process baseline and report where "
                   "tensors drift",
                   [](CLI::App& sub) {
                     auto a = std::make_shared<RegressArgs>();
                     sub.add_option("--config,-c", a->config, "regression config (YAML)")
                         ->check(CLI::ExistingFile);
                     sub.add_flag("--reference", a->reference,
                                  "print every key of the regression config with type, default "
                                  "and meaning (Markdown)");
                     sub.add_option("--only", a->only,
                                    "run only these layouts (and their baselines); repeatable");
                     sub.add_option("--output,-o", a->output, "output folder (default: the config's)");
                     sub.footer(
                         "Each layout runs `driftless train` (under mpirun when ranks > 1) with "
                         "tensor logs; every logged tensor is compared with the drift metric "
                         "(rms_rel) against the tolerance of its class. Exit status 1 on any "
                         "failure.");
                     return std::function<int()>([a] { return run_regress(*a); });
                   }});

struct ReportArgs {
  std::string a, b, output, config, dtype = "f32", band;
  double band_factor = 1.5;
  std::vector<double> tol = {1e-5, 1e-5, 1e-5, 1e-5};
};

Registrar report({"report", "Compare the tensor logs of two existing runs (A is the reference)",
                  [](CLI::App& sub) {
                    auto a = std::make_shared<ReportArgs>();
                    sub.add_option("run_a", a->a, "reference run directory")->required()->check(CLI::ExistingDirectory);
                    sub.add_option("run_b", a->b, "test run directory")->required()->check(CLI::ExistingDirectory);
                    sub.add_option("--output,-o", a->output, "where report.json/html go (default: RUN_B)");
                    sub.add_option("--tolerance", a->tol,
                                   "rms_rel limits: forward backward param_grad param")
                        ->expected(4);
                    sub.add_option("--config,-c", a->config,
                                   "take tolerances, overrides and epsilon from a regression config");
                    sub.add_option("--dtype", a->dtype, "which of the config's tolerances (f32, bf16)");
                    sub.add_option("--band", a->band,
                                   "a second reference run (RUN_A's model in another precision): "
                                   "each tensor's tolerance becomes --band-factor x its drift "
                                   "between RUN_A and this run, when that is larger")
                        ->check(CLI::ExistingDirectory);
                    sub.add_option("--band-factor", a->band_factor, "see --band")
                        ->capture_default_str();
                    return std::function<int()>([a] {
                      auto steps = train::common_log_steps(a->a, a->b);
                      DL_CHECK(!steps.empty(), "report",
                               "no tensor-log step is common to " << a->a << " and " << a->b);
                      std::map<std::string, double> tol{{"forward", a->tol[0]}, {"backward", a->tol[1]},
                                                        {"param_grad", a->tol[2]}, {"param", a->tol[3]}};
                      std::vector<train::ToleranceOverride> overrides;
                      double eps = 1e-12;
                      if (!a->config.empty()) {
                        auto rc = train::load_regress_config(a->config, {});
                        DL_CHECK(rc.tolerances.count(a->dtype), "report",
                                 a->config << " has no tolerances for " << a->dtype);
                        tol = rc.tolerances[a->dtype];
                        overrides = train::overrides_for(a->dtype, rc.tolerance_overrides);
                        eps = rc.epsilon;
                      }
                      auto r = train::compare_runs(a->a, a->b, steps, tol, eps, overrides);
                      if (!a->band.empty()) {
                        const auto band =
                            train::compare_runs(a->a, a->band, steps, tol, eps, overrides);
                        DL_CHECK(band.error.empty(), "report", "band run: " << band.error);
                        train::apply_band(r, band, a->band_factor);
                        std::cout << "band: each tensor's tolerance is " << a->band_factor
                                  << " x its drift between " << a->a << " and " << a->band
                                  << " where that exceeds the class tolerance\n";
                      }
                      r.name = std::filesystem::path(a->b).filename().string();
                      r.baseline = std::filesystem::path(a->a).filename().string();
                      return finish({r}, a->output.empty() ? a->b : a->output,
                                    "driftless report: " + a->b + " vs " + a->a);
                    });
                  }});

}  // namespace
}  // namespace driftless::apps
