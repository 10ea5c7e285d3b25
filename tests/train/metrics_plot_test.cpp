// Loss-curve plots (train/metrics_plot.h, svg_chart.h): one polyline per run and
// series, data extremes on the data area's bounds, a lone point still drawn, long series
// thinned without losing a spike, balanced HTML with nothing external, and the regress
// report embedding and linking the plot.
#include "train/metrics_plot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "engine/core/error.h"
#include "tests/test_paths.h"
#include "train/regress.h"

namespace driftless::train {
namespace {

namespace fs = std::filesystem;

RunMetrics run(const std::string& name, std::vector<double> loss, std::vector<MetricPoint> val,
               double tps = 1000) {
  RunMetrics r;
  r.name = name;
  r.path = "/runs/" + name + "/metrics.jsonl";
  for (size_t i = 0; i < loss.size(); ++i) {
    r.loss.push_back({int64_t(i), loss[i]});
    r.tokens_per_second.push_back({int64_t(i), tps + 10 * double(i)});
  }
  r.val_loss = std::move(val);
  return r;
}

struct Polyline {
  std::string run, series;
  std::vector<std::pair<double, double>> points;
};

std::vector<Polyline> polylines(const std::string& svg) {
  static const std::regex re(
      "<polyline data-run='([^']*)' data-series='([^']*)'[^>]* points='([^']*)'");
  std::vector<Polyline> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator();
       ++it) {
    Polyline p{(*it)[1], (*it)[2], {}};
    std::istringstream pts((*it)[3].str());
    std::string xy;
    while (pts >> xy) {
      const size_t comma = xy.find(',');
      p.points.emplace_back(std::stod(xy.substr(0, comma)), std::stod(xy.substr(comma + 1)));
    }
    out.push_back(p);
  }
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// Every opened element is closed in order (void HTML elements and "/>" aside). Returns ""
// when balanced, else what went wrong.
std::string tag_balance(const std::string& doc) {
  static const std::vector<std::string> kVoid = {"meta", "br", "hr", "img", "input", "link"};
  std::vector<std::string> open;
  size_t p = 0;
  while ((p = doc.find('<', p)) != std::string::npos) {
    const size_t end = doc.find('>', p);
    if (end == std::string::npos) return "unterminated tag at byte " + std::to_string(p);
    const std::string tag = doc.substr(p + 1, end - p - 1);
    p = end + 1;
    if (tag.empty() || tag[0] == '!' || tag[0] == '?') continue;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name)
        return "</" + name + "> closes <" + (open.empty() ? "nothing" : open.back()) + ">";
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \t\n/"));
    if (tag.back() == '/' || std::count(kVoid.begin(), kVoid.end(), name)) continue;
    open.push_back(name);
  }
  return open.empty() ? "" : "<" + open.back() + "> never closed";
}

TEST(MetricsPlot, OnePolylinePerRunAndSeries) {
  const std::vector<RunMetrics> runs = {run("simple", {5, 4, 3}, {{1, 4.5}, {2, 3.5}}),
                                        run("sdp2_ms4", {5, 4, 3}, {})};
  const std::string svg = metrics_svg(runs, "t");
  const auto lines = polylines(svg);
  auto n = [&](const std::string& r, const std::string& s) {
    return std::count_if(lines.begin(), lines.end(),
                         [&](const Polyline& p) { return p.run == r && p.series == s; });
  };
  EXPECT_EQ(lines.size(), 5u);
  EXPECT_EQ(n("simple", "loss"), 1);
  EXPECT_EQ(n("simple", "val_loss"), 1);
  EXPECT_EQ(n("simple", "tokens_per_second"), 1);
  EXPECT_EQ(n("sdp2_ms4", "loss"), 1);
  EXPECT_EQ(n("sdp2_ms4", "val_loss"), 0);
  EXPECT_EQ(n("sdp2_ms4", "tokens_per_second"), 1);
  // Validation: dashed and marked in the run's colour; each run its own colour, in the legend.
  EXPECT_NE(svg.find("data-series='val_loss' fill='none' stroke='" + run_colour(0) +
                     "' stroke-width='1.6' stroke-linejoin='round' stroke-dasharray"),
            std::string::npos);
  EXPECT_EQ(count(svg, "<circle cx="), 2u + 1u);  // two val markers + the legend's key
  EXPECT_NE(run_colour(0), run_colour(1));
  EXPECT_NE(svg.find("data-legend='simple'"), std::string::npos);
  EXPECT_NE(svg.find("data-legend='sdp2_ms4'"), std::string::npos);
  EXPECT_EQ(tag_balance(svg), "");
}

TEST(MetricsPlot, DataExtremesMapToTheAreaBounds) {
  // Lowest value a validation loss, highest a train loss; steps 0..9 and 0..4.
  const std::vector<RunMetrics> runs = {
      run("a", {9, 7, 6, 5, 4, 3.5, 3.2, 3.1, 3.05, 3.0}, {{9, 2.5}}),
      run("b", {8, 6, 5, 4.5, 4.2}, {})};
  const auto charts = metrics_charts(runs);
  ASSERT_EQ(charts.size(), 2u);
  const ChartArea a = chart_area(charts[0]);
  const auto lines = polylines(render_line_chart(charts[0]));
  ASSERT_EQ(lines.size(), 3u);
  double x0 = 1e9, x1 = -1e9, y0 = 1e9, y1 = -1e9;
  for (const auto& l : lines)
    for (const auto& [x, y] : l.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  EXPECT_NEAR(x0, a.left, 0.06);
  EXPECT_NEAR(x1, a.right, 0.06);
  EXPECT_NEAR(y0, a.top, 0.06);     // loss 9 (a, step 0)
  EXPECT_NEAR(y1, a.bottom, 0.06);  // val_loss 2.5 (a, step 9)
  EXPECT_NEAR(lines[0].points[0].second, a.top, 0.06);
  EXPECT_NEAR(lines[1].points[0].second, a.bottom, 0.06);
  // Step 4 of b sits at 4/9 of the width.
  EXPECT_NEAR(lines[2].points[4].first, a.left + 4.0 / 9.0 * (a.right - a.left), 0.06);
  // Throughput starts at zero.
  const auto [xs, ys] = chart_scales(charts[1]);
  EXPECT_EQ(ys.d0, 0);
  EXPECT_DOUBLE_EQ(ys.d1, 1090);
  EXPECT_EQ(xs.d1, 9);
}

TEST(MetricsPlot, TheDifferenceChartSubtractsTheFirstRun) {
  // b logs steps 0..3 and a validation loss at 3; a logs 0..4 and validation at 1 and 3.
  const std::vector<RunMetrics> runs = {run("a", {5, 4, 3, 2.5, 2}, {{1, 4.5}, {3, 3.0}}),
                                        run("b", {5.5, 4.25, 3, 2}, {{3, 3.5}})};
  EXPECT_EQ(metrics_charts(runs).size(), 2u);  // only when asked
  const auto charts = metrics_charts(runs, 0, true);
  ASSERT_EQ(charts.size(), 3u);
  const LineChart& d = charts[2];
  EXPECT_EQ(d.title, "difference from a");
  ASSERT_EQ(d.series.size(), 2u);
  EXPECT_EQ(d.series[0].run, "b");
  EXPECT_EQ(d.series[0].series, "loss_difference");
  const std::vector<std::pair<double, double>> want = {{0, 0.5}, {1, 0.25}, {2, 0}, {3, -0.5}};
  EXPECT_EQ(d.series[0].points, want);
  EXPECT_EQ(d.series[1].series, "val_loss_difference");
  EXPECT_TRUE(d.series[1].dashed);
  EXPECT_EQ(d.series[1].points, (std::vector<std::pair<double, double>>{{3, 0.5}}));
  EXPECT_GE(d.y, charts[1].y + charts[1].height);
  // The SVG holds the third chart above the legend; one run alone gets no difference.
  const std::string svg = metrics_svg(runs, "t", true);
  const auto lines = polylines(svg);
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                          [](const Polyline& p) { return p.series == "loss_difference"; }),
            1);
  EXPECT_EQ(tag_balance(svg), "");
  EXPECT_EQ(metrics_charts({runs[0]}, 0, true).size(), 2u);
}

TEST(MetricsPlot, ASinglePointStillPlots) {
  const std::vector<RunMetrics> runs = {run("one", {4.2}, {{0, 4.3}})};
  const std::string svg = metrics_svg(runs, "");
  const auto lines = polylines(svg);
  ASSERT_EQ(lines.size(), 3u);
  for (const auto& l : lines) ASSERT_EQ(l.points.size(), 1u) << l.series;
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  // The lone train point and tokens/s point get markers; the val point has its own.
  EXPECT_EQ(count(svg, "<circle cx="), 3u + 1u);
  const auto charts = metrics_charts(runs);
  const auto [xs, ys] = chart_scales(charts[0]);
  EXPECT_LT(xs.d0, 0);
  EXPECT_GT(xs.d1, 0);
  EXPECT_DOUBLE_EQ(ys.d0, 4.2);
  EXPECT_DOUBLE_EQ(ys.d1, 4.3);
}

TEST(MetricsPlot, LongSeriesAreThinnedKeepingSpikes) {
  std::vector<double> loss(100000, 3.0);
  loss[51234] = 7.0;  // a spike
  loss[0] = 5.0;
  const std::vector<RunMetrics> runs = {run("long", loss, {})};
  const auto charts = metrics_charts(runs);
  const ChartArea a = chart_area(charts[0]);
  const auto lines = polylines(render_line_chart(charts[0]));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_LE(lines[0].points.size(), size_t(4 * (a.right - a.left + 1)));
  EXPECT_GE(lines[0].points.size(), size_t(a.right - a.left));
  double top = 1e9;
  for (const auto& p : lines[0].points) top = std::min(top, p.second);
  EXPECT_NEAR(top, a.top, 0.06);
  EXPECT_NEAR(lines[0].points.back().first, a.right, 0.06);
}

TEST(MetricsPlot, TheLargestFiniteValuesPlot) {
  // The span of ±1e308 overflows a double: ticks once looped forever on it.
  const std::vector<RunMetrics> runs = {run("huge", {1e308, -1e308, 1.7e308}, {{1, -1.7e308}})};
  const std::string svg = metrics_svg(runs, "");
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  const auto lines = polylines(svg);
  ASSERT_EQ(lines.size(), 3u);
  for (const auto& l : lines)
    for (const auto& [x, y] : l.points) EXPECT_TRUE(std::isfinite(x) && std::isfinite(y));
  const auto t = nice_ticks(-1e308, 1e308, 6);
  EXPECT_GE(t.size(), 3u);
  EXPECT_LE(t.size(), 12u);
  EXPECT_LT(format_tick(1e308, 5e307).size(), 12u) << format_tick(1e308, 5e307);
}

TEST(MetricsPlot, TicksAreRound) {
  EXPECT_EQ(nice_ticks(0, 10, 5), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(nice_ticks(0, 3, 8, true), (std::vector<double>{0, 1, 2, 3}));
  const auto t = nice_ticks(2.31, 2.97, 6);
  ASSERT_FALSE(t.empty());
  EXPECT_NEAR(t.front(), 2.4, 1e-12);
  EXPECT_NEAR(t[1] - t[0], 0.1, 1e-12);
  EXPECT_LE(t.back(), 2.97);
  EXPECT_EQ(format_tick(12000, 2000, true), "12k");
  EXPECT_EQ(format_tick(1500000, 500000, true), "1.5M");
  EXPECT_EQ(format_tick(0.25, 0.05), "0.25");
  EXPECT_EQ(format_tick(2.5, 2.5), "2.5");
  EXPECT_EQ(format_tick(400, 100), "400");
}

TEST(MetricsPlot, HtmlIsSelfContainedAndBalanced) {
  const std::vector<RunMetrics> runs = {run("a<b & 'c'", {5, 4}, {{1, 4.5}}), run("b", {5, 3}, {})};
  const std::string html = metrics_html(runs, "plot <title>");
  EXPECT_EQ(tag_balance(html), "");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src="), std::string::npos);
  EXPECT_EQ(html.find("href="), std::string::npos);
  EXPECT_EQ(count(html, "http"), 1u);  // the SVG namespace only
  EXPECT_NE(html.find("a&lt;b &amp; &#39;c&#39;"), std::string::npos);
  EXPECT_NE(html.find("<h1>plot &lt;title&gt;</h1>"), std::string::npos);
  EXPECT_EQ(count(html, "<tr>"), 3u);  // header and one row per run
  EXPECT_EQ(polylines(html).size(), 5u);
}

TEST(MetricsPlot, WritesByExtensionAndDefaultPaths) {
  const fs::path dir = driftless::testing::scratch_dir();
  const std::vector<RunMetrics> runs = {run("a", {5, 4}, {})};
  write_metrics_plot((dir / "sub/p.svg").string(), runs, "T");
  std::ifstream in(dir / "sub/p.svg");
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find(">T</text>"), std::string::npos);
  EXPECT_EQ(svg.find("<html"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "sub/p.svg.tmp"));
  write_metrics_plot((dir / "p.HTML").string(), runs, "T");
  EXPECT_TRUE(fs::exists(dir / "p.HTML"));
  EXPECT_THROW(write_metrics_plot((dir / "p.png").string(), runs, "T"), Error);
  EXPECT_THROW(write_metrics_plot((dir / "q.svg").string(), {}, "T"), Error);
  fs::create_directories(dir / "runs/a");
  fs::create_directories(dir / "runs/b");
  const std::string a = (dir / "runs/a").string(), b = (dir / "runs/b/").string();
  EXPECT_EQ(default_plot_path({a}), (dir / "runs/a/loss.html").string());
  EXPECT_EQ(default_plot_path({b}), (dir / "runs/b/loss.html").string());
  EXPECT_EQ(default_plot_path({a, b}), (dir / "runs/plot.html").string());
}

TEST(MetricsPlot, ReportEmbedsAndLinksThePlotOfEveryRun) {
  const fs::path dir = driftless::testing::scratch_dir();
  for (const char* name : {"simple", "sdp2", "broken"}) fs::create_directories(dir / name);
  std::ofstream(dir / "simple/metrics.jsonl")
      << "{\"step\":0,\"loss\":5}\n{\"step\":1,\"loss\":4}\n";
  std::ofstream(dir / "sdp2/metrics.jsonl") << "{\"step\":0,\"loss\":5}\n{\"step\":1,\"loss\":4}\n";
  std::vector<LayoutResult> results(2);
  results[0].name = "sdp2";
  results[1].name = "broken";
  results[0].baseline = results[1].baseline = "simple";
  results[0].run_dir = (dir / "sdp2").string();
  results[1].run_dir = (dir / "broken").string();
  results[1].ran = false;
  results[1].error = "train exited with 1";
  results[0].baseline_dir = results[1].baseline_dir = (dir / "simple").string();
  write_report_html((dir / "report.html").string(), "regress", results);
  ASSERT_TRUE(fs::exists(dir / "loss.html"));
  std::ifstream in(dir / "report.html");
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(tag_balance(html), "");
  EXPECT_NE(html.find("href='loss.html'"), std::string::npos);
  const auto lines = polylines(html);
  ASSERT_EQ(lines.size(), 2u);  // loss of simple and sdp2 (no tokens/s in these files)
  EXPECT_EQ(lines[0].run, "simple");
  EXPECT_EQ(lines[1].run, "sdp2");
  EXPECT_NE(html.find("not plotted: [plot] " + (dir / "broken").string() + ": no metrics.jsonl"),
            std::string::npos);
  std::ifstream page(dir / "loss.html");
  const std::string plot((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  EXPECT_EQ(polylines(plot).size(), 2u);
  EXPECT_EQ(tag_balance(plot), "");
}

}  // namespace
}  // namespace driftless::train
