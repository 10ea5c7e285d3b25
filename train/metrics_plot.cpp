// Loss-curve plots of runs (metrics_plot.h): the loss and throughput charts (and the
// difference from the first run), a legend shared by all, the HTML page with its summary table, and
// writing either to a file.
#include "train/metrics_plot.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/core/error.h"

namespace driftless::train {

namespace fs = std::filesystem;

namespace {

constexpr double kWidth = 900, kLossHeight = 330, kRateHeight = 250, kTitleHeight = 30;
constexpr double kDifferenceHeight = 250;
constexpr double kLegendColumn = 220, kLegendRow = 18, kLegendLeft = 76;

std::vector<std::pair<double, double>> xy(const std::vector<MetricPoint>& p) {
  std::vector<std::pair<double, double>> o;
  o.reserve(p.size());
  for (const auto& q : p) o.emplace_back(double(q.step), q.value);
  return o;
}

// b - a at the steps both have, in order of step.
std::vector<std::pair<double, double>> difference(const std::vector<MetricPoint>& a,
                                                  const std::vector<MetricPoint>& b) {
  std::map<int64_t, double> at;
  for (const auto& p : a) at[p.step] = p.value;
  std::vector<std::pair<double, double>> o;
  for (const auto& p : b) {
    const auto it = at.find(p.step);
    if (it != at.end()) o.emplace_back(double(p.step), p.value - it->second);
  }
  return o;
}

std::string fixed(double v, int decimals) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

// Legend: a key of the line styles, then one entry per run in rows of columns.
std::string legend(const std::vector<RunMetrics>& runs, double top, double* height) {
  const int columns = std::max(1, int((kWidth - kLegendLeft) / kLegendColumn));
  const int rows = int((runs.size() + size_t(columns) - 1) / size_t(columns));
  std::ostringstream s;
  s << "<g font-family='sans-serif' font-size='12' fill='#333'>";
  const double ky = top + 12, kx = kLegendLeft;
  s << "<line x1='" << kx << "' x2='" << kx + 24 << "' y1='" << ky - 4 << "' y2='" << ky - 4
    << "' stroke='#555' stroke-width='1.6'/><text x='" << kx + 30 << "' y='" << ky
    << "'>train loss, tokens/s</text>";
  const bool any_val = std::any_of(runs.begin(), runs.end(),
                                   [](const RunMetrics& r) { return !r.val_loss.empty(); });
  if (any_val)
    s << "<line x1='" << kx + 190 << "' x2='" << kx + 214 << "' y1='" << ky - 4 << "' y2='"
      << ky - 4 << "' stroke='#555' stroke-width='1.6' stroke-dasharray='6,4'/><circle cx='"
      << kx + 202 << "' cy='" << ky - 4 << "' r='3' fill='#555'/><text x='" << kx + 220 << "' y='"
      << ky << "'>validation loss</text>";
  for (size_t i = 0; i < runs.size(); ++i) {
    const double x = kLegendLeft + double(i % size_t(columns)) * kLegendColumn;
    const double y = top + 12 + kLegendRow * double(1 + i / size_t(columns));
    s << "<g data-legend='" << xml_escape(runs[i].name) << "'><rect x='" << x << "' y='" << y - 9
      << "' width='24' height='10' fill='" << run_colour(i) << "'/><text x='" << x + 30 << "' y='"
      << y << "'><title>" << xml_escape(runs[i].path) << "</title>" << xml_escape(runs[i].name)
      << "</text></g>";
  }
  s << "</g>";
  *height = 12 + kLegendRow * double(rows) + 12;
  return s.str();
}

std::string svg_element(const std::vector<RunMetrics>& runs, const std::string& title,
                        bool with_difference) {
  const double top = title.empty() ? 0 : kTitleHeight;
  const auto charts = metrics_charts(runs, top, with_difference);
  const double charts_end = charts.back().y + charts.back().height;
  double legend_height = 0;
  const std::string key = legend(runs, charts_end, &legend_height);
  const double height = charts_end + legend_height;
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << kWidth << "' height='" << height
    << "' viewBox='0 0 " << kWidth << " " << height << "'><rect width='" << kWidth << "' height='"
    << height << "' fill='#fff'/>";
  if (!title.empty())
    s << "<text x='" << kLegendLeft - 6 << "' y='20' font-family='sans-serif' font-size='15' "
      << "font-weight='bold' fill='#222'>" << xml_escape(title) << "</text>";
  for (const auto& c : charts) s << render_line_chart(c);
  s << key << "</svg>";
  return s.str();
}

}  // namespace

std::string run_colour(size_t i) {
  static const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kPalette[i % (sizeof kPalette / sizeof *kPalette)];
}

std::vector<LineChart> metrics_charts(const std::vector<RunMetrics>& runs, double top,
                                      bool with_difference) {
  LineChart loss, rate;
  loss.title = "loss";
  loss.x_label = rate.x_label = "step";
  loss.y_label = "loss";
  loss.y = top;
  loss.width = rate.width = kWidth;
  loss.height = kLossHeight;
  rate.title = "throughput";
  rate.y_label = "tokens/s";
  rate.y = top + kLossHeight;
  rate.height = kRateHeight;
  rate.y_from_zero = rate.y_si = true;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& r = runs[i];
    const std::string colour = run_colour(i);
    if (!r.loss.empty())
      loss.series.push_back({r.name, "loss", colour, r.name + ": train loss", xy(r.loss)});
    if (!r.val_loss.empty())
      loss.series.push_back(
          {r.name, "val_loss", colour, r.name + ": validation loss", xy(r.val_loss), true, true});
    if (!r.tokens_per_second.empty())
      rate.series.push_back(
          {r.name, "tokens_per_second", colour, r.name + ": tokens/s", xy(r.tokens_per_second)});
  }
  if (!with_difference || runs.size() < 2) return {loss, rate};
  LineChart diff;
  diff.title = "difference from " + runs[0].name;
  diff.x_label = "step";
  diff.y_label = "loss difference";
  diff.y = top + kLossHeight + kRateHeight;
  diff.width = kWidth;
  diff.height = kDifferenceHeight;
  for (size_t i = 1; i < runs.size(); ++i) {
    const RunMetrics& r = runs[i];
    const std::string colour = run_colour(i);
    auto d = difference(runs[0].loss, r.loss);
    if (!d.empty())
      diff.series.push_back({r.name, "loss_difference", colour,
                             r.name + ": train loss - " + runs[0].name + "'s", std::move(d)});
    d = difference(runs[0].val_loss, r.val_loss);
    if (!d.empty())
      diff.series.push_back({r.name, "val_loss_difference", colour,
                             r.name + ": validation loss - " + runs[0].name + "'s", std::move(d),
                             true, true});
  }
  return {loss, rate, diff};
}

std::string metrics_svg(const std::vector<RunMetrics>& runs, const std::string& title,
                        bool with_difference) {
  return svg_element(runs, title, with_difference);
}

std::string metrics_html(const std::vector<RunMetrics>& runs, const std::string& title,
                         bool with_difference) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>" << xml_escape(title)
    << "</title><style>body{font-family:sans-serif;margin:20px;color:#222}"
       "table{border-collapse:collapse;font-size:12px;margin-top:12px}"
       "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
       "td:first-child,th:first-child,td.path{text-align:left}"
       ".swatch{display:inline-block;width:12px;height:12px;margin-right:6px;"
       "vertical-align:middle}.note{color:#666;font-size:12px}</style></head><body><h1>"
    << xml_escape(title) << "</h1>" << svg_element(runs, "", with_difference)
    << "<table><tr><th>run</th><th>steps</th><th>last loss</th><th>lowest loss</th>"
       "<th>last val_loss</th><th>lowest val_loss</th><th>last tokens/s</th>"
       "<th>non-finite</th><th>metrics file</th></tr>";
  auto lowest = [](const std::vector<MetricPoint>& p) {
    const auto it = std::min_element(
        p.begin(), p.end(),
        [](const MetricPoint& a, const MetricPoint& b) { return a.value < b.value; });
    return fixed(it->value, 4) + " <span class='note'>(step " + std::to_string(it->step) +
           ")</span>";
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& r = runs[i];
    h << "<tr><td><span class='swatch' style='background:" << run_colour(i) << "'></span>"
      << xml_escape(r.name) << "</td><td>"
      << (r.loss.empty() ? std::string("-")
                         : std::to_string(r.loss.front().step) + "&#8211;" +
                               std::to_string(r.loss.back().step))
      << "</td><td>" << (r.loss.empty() ? "-" : fixed(r.loss.back().value, 4)) << "</td><td>"
      << (r.loss.empty() ? "-" : lowest(r.loss)) << "</td><td>"
      << (r.val_loss.empty() ? "-" : fixed(r.val_loss.back().value, 4)) << "</td><td>"
      << (r.val_loss.empty() ? "-" : lowest(r.val_loss)) << "</td><td>"
      << (r.tokens_per_second.empty() ? "-" : fixed(r.tokens_per_second.back().value, 0))
      << "</td><td>" << r.non_finite << "</td><td class='path'>" << xml_escape(r.path)
      << "</td></tr>";
  }
  h << "</table><p class='note'>Steps count from 0 as in metrics.jsonl; tokens/s is the "
       "running mean of the run's training steps. Written by <code>driftless plot</code>.</p>"
       "</body></html>\n";
  return h.str();
}

void write_metrics_plot(const std::string& path, const std::vector<RunMetrics>& runs,
                        const std::string& title, bool with_difference) {
  DL_CHECK(!runs.empty(), "plot", "expected at least one run to plot, got none");
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  DL_CHECK(ext == ".svg" || ext == ".html" || ext == ".htm", "plot",
           "expected an output file ending in .html or .svg, got " << path);
  const std::string text = ext == ".svg" ? "<?xml version='1.0' encoding='UTF-8'?>\n" +
                                               metrics_svg(runs, title, with_difference) + "\n"
                                         : metrics_html(runs, title, with_difference);
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    DL_CHECK(out.good(), "plot", "cannot write " << tmp);
    out << text;
    out.close();
    DL_CHECK(out.good(), "plot", "cannot write " << tmp);
  }
  fs::rename(tmp, path);
}

std::string default_plot_path(const std::vector<std::string>& run_dirs) {
  DL_CHECK(!run_dirs.empty(), "plot", "expected at least one run directory, got none");
  const fs::path first = run_directory(run_dirs.front());
  return (run_dirs.size() == 1 ? first / "loss.html" : first.parent_path() / "plot.html").string();
}

}  // namespace driftless::train
