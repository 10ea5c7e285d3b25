// A small line chart written as inline SVG (the metrics plots of `driftless plot` and the
// regress report): linear axes with round ticks, solid or dashed polylines, point markers with
// hover titles. Attributes only, no scripts or CSS, so it can be embedded in any page.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace driftless::train {

// Maps the data interval [d0, d1] onto the pixel interval [r0, r1] (r1 < r0 for a y axis).
struct LinearScale {
  double d0 = 0, d1 = 1, r0 = 0, r1 = 1;
  // Halves first: the span of ±1e308 does not overflow.
  double operator()(double v) const {
    return r0 + (v / 2 - d0 / 2) / (d1 / 2 - d0 / 2) * (r1 - r0);
  }
};

// Round tick values (steps of 1, 2, 2.5 or 5 times a power of ten) inside [lo, hi], about
// `target` of them; `integer` keeps the step at 1 or more.
std::vector<double> nice_ticks(double lo, double hi, int target, bool integer = false);
// A tick label: as many decimals as the tick step needs; `si` writes 12k, 3.5M.
std::string format_tick(double v, double step, bool si = false);

struct ChartSeries {
  std::string run, series;  // written as data-run / data-series, for tests and readers
  std::string colour;
  std::string title;                              // hover text of the line
  std::vector<std::pair<double, double>> points;  // (x, y), finite, in order of x
  bool dashed = false;
  bool markers = false;  // a circle with a hover title at each point
};

struct LineChart {
  std::string title, x_label, y_label;
  double x = 0, y = 0, width = 900, height = 320;  // the chart's box in the SVG
  bool x_integer = true;                           // steps
  bool y_from_zero = false;                        // throughput: the y axis starts at 0
  bool y_si = false;                               // y tick labels as 12k, 3.5M
  std::vector<ChartSeries> series;
};

// The data area of a chart: the smallest x maps to left, the largest to right, the
// smallest y to bottom and the largest to top.
struct ChartArea {
  double left, top, right, bottom;
};
ChartArea chart_area(const LineChart& c);
// The x and y scales of a chart over all its series (degenerate ranges are widened).
std::pair<LinearScale, LinearScale> chart_scales(const LineChart& c);

// The chart as SVG elements (a <g>), to be placed inside an <svg>. A series of more points
// than twice the area's width is thinned to the first, lowest, highest and last point of
// each pixel column, which draws the same picture.
std::string render_line_chart(const LineChart& c);

// Text safe inside SVG/HTML elements and attribute values.
std::string xml_escape(const std::string& s);

}  // namespace driftless::train
