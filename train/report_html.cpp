// The self-contained HTML drift report: per layout an inline SVG chart of rms_rel of every
// tensor in execution order on a log axis with the tolerance line, then the tables. No
// scripts, fonts or other network resources. Above them, the loss curves of the compared runs,
// embedded and linked to their own page (metrics_plot.h).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "train/metrics_plot.h"
#include "train/regress.h"

namespace driftless::train {

namespace {

std::string esc(const std::string& s) {
  return xml_escape(s);
}

std::string sci(double v) {
  if (std::isinf(v)) return "inf";
  std::ostringstream os;
  os << std::scientific << std::setprecision(2) << v;
  return os.str();
}

std::string chart(const LayoutResult& r) {
  const double w = 900, h = 260, left = 60, right = 10, top = 10, bottom = 30;
  const double lo = -16, hi = 1;  // log10 range of rms_rel
  auto y_of = [&](double v) {
    double l = v > 0 && std::isfinite(v) ? std::log10(v) : (v > 0 ? hi : lo);
    l = std::clamp(l, lo, hi);
    return top + (hi - l) / (hi - lo) * (h - top - bottom);
  };
  const size_t n = std::max<size_t>(r.tensors.size(), 1);
  auto x_of = [&](size_t i) { return left + (double(i) + 0.5) / double(n) * (w - left - right); };
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h
    << "' style='background:#fff;border:1px solid #ccc'>";
  for (int e = int(lo); e <= int(hi); e += 2) {
    const double y = y_of(std::pow(10.0, e));
    s << "<line x1='" << left << "' x2='" << w - right << "' y1='" << y << "' y2='" << y
      << "' stroke='#eee'/><text x='4' y='" << y + 4 << "' font-size='11'>1e" << e << "</text>";
  }
  // Tolerance line(s): one segment per tensor so per-class tolerances show.
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const double y = y_of(r.tensors[i].tolerance);
    s << "<line x1='" << x_of(i) - 0.5 * (w - left - right) / double(n) << "' x2='"
      << x_of(i) + 0.5 * (w - left - right) / double(n) << "' y1='" << y << "' y2='" << y
      << "' stroke='#d33' stroke-width='1.5'/>";
  }
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const auto& t = r.tensors[i];
    s << "<circle cx='" << x_of(i) << "' cy='" << y_of(t.drift.rms_rel) << "' r='3' fill='"
      << (t.pass ? "#2a7" : "#d33") << "'><title>step " << t.step << " " << esc(t.name)
      << ": " << sci(t.drift.rms_rel) << "</title></circle>";
  }
  s << "<text x='" << left << "' y='" << h - 8
    << "' font-size='11'>tensors in execution order (forward, backward, parameter gradients, "
       "parameters) &#8594;</text></svg>";
  return s.str();
}

}  // namespace

ReportPlot write_comparison_plot(const std::string& path, const std::vector<LayoutResult>& results,
                                 const std::string& title) {
  std::vector<std::string> dirs;
  for (const auto& r : results)
    for (const std::string& d : {r.baseline_dir, r.run_dir})
      if (!d.empty() && std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  ReportPlot plot;
  std::vector<RunMetrics> runs;
  for (const auto& d : dirs) {
    try {  // a layout that failed to start may have no or an empty metrics.jsonl
      runs.push_back(read_run_metrics(d));
    } catch (const Error& e) {
      plot.left_out.push_back(e.what());
    }
  }
  if (runs.empty()) return plot;
  make_names_unique(runs);
  write_metrics_plot(path, runs, title);
  plot.href = std::filesystem::path(path).filename().string();
  plot.svg = metrics_svg(runs, "");
  return plot;
}

void write_report_html(const std::string& path, const std::string& title,
                       const std::vector<LayoutResult>& results) {
  const std::filesystem::path beside = std::filesystem::path(path).parent_path() / "loss.html";
  const ReportPlot plot = write_comparison_plot(beside.string(), results, "loss curves: " + title);
  std::ostringstream h;
  h << "<!DOCTYPE html><html><head><meta charset='utf-8'><title>" << esc(title)
    << "</title><style>body{font-family:sans-serif;margin:20px;color:#222}"
       "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;"
       "text-align:left}.pass{color:#2a7;font-weight:bold}.fail{color:#d33;font-weight:bold}"
       "details{margin:8px 0}</style></head><body><h1>"
    << esc(title) << "</h1><table><tr><th>layout</th><th>baseline</th><th>ranks</th><th>status</th>"
       "<th>worst tensor</th><th>rms_rel</th><th>first failing tensor</th></tr>";
  for (const auto& r : results) {
    const TensorDrift* w = r.worst();
    const TensorDrift* f = r.first_failure();
    const bool ok = r.pass();
    h << "<tr><td><a href='#" << esc(r.name) << "'>" << esc(r.name) << "</a></td><td>"
      << esc(r.baseline) << "</td><td>" << r.ranks << "</td><td class='" << (ok ? "pass" : "fail")
      << "'>" << (!r.ran ? "ERROR" : ok ? "pass" : "FAIL") << "</td><td>"
      << (w ? esc(w->name) : "-") << "</td><td>" << (w ? sci(w->drift.rms_rel) : "-")
      << "</td><td>" << (f ? "step " + std::to_string(f->step) + " " + esc(f->name) : esc(r.error))
      << "</td></tr>";
  }
  h << "</table>";
  if (!plot.svg.empty() || !plot.left_out.empty()) {
    h << "<h2 id='loss-curves'>Loss curves</h2>";
    if (!plot.href.empty())
      h << "<p>Train and validation loss and tokens/s of every run, overlaid (<a href='"
        << esc(plot.href) << "'>" << esc(plot.href) << "</a>).</p>";
    h << plot.svg;
    for (const auto& why : plot.left_out)
      h << "<p class='fail'>not plotted: " << esc(why) << "</p>";
  }
  for (const auto& r : results) {
    h << "<h2 id='" << esc(r.name) << "'>" << esc(r.name) << " vs " << esc(r.baseline) << "</h2>";
    if (!r.error.empty()) h << "<p class='fail'>" << esc(r.error) << "</p>";
    h << chart(r) << "<details><summary>" << r.tensors.size()
      << " tensors</summary><table><tr><th>step</th><th>#</th><th>tensor</th><th>class</th>"
         "<th>rms_rel</th><th>max_rel</th><th>tolerance</th></tr>";
    for (const auto& t : r.tensors)
      h << "<tr><td>" << t.step << "</td><td>" << t.order << "</td><td>" << esc(t.name)
        << "</td><td>" << t.kind << "</td><td class='" << (t.pass ? "pass" : "fail") << "'>"
        << sci(t.drift.rms_rel) << "</td><td>" << sci(t.drift.max_rel) << "</td><td>"
        << sci(t.tolerance)
        << (t.tolerance_reason.empty() ? "" : " <span title='" + esc(t.tolerance_reason) + "'>(override: " + esc(t.tolerance_reason) + ")</span>")
        << "</td></tr>";
    h << "</table></details>";
  }
  h << "</body></html>\n";
  std::ofstream(path) << h.str();
}

}  // namespace driftless::train
