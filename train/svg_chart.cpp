// Line charts as inline SVG (svg_chart.h): scales, round ticks, polylines thinned per pixel
// column, and escaping.
#include "train/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace driftless::train {

namespace {

// Margins of the chart box around the data area: room for the title, tick labels and axis
// labels. The frame is drawn kInset pixels outside the data area, so lines at the extremes
// do not lie on it.
constexpr double kLeft = 76, kRight = 16, kTop = 30, kBottom = 46, kInset = 6;
constexpr int kMaxMarkers = 400;  // more points than this: the line alone

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

int decimals_of(double step) {
  int d = 0;
  double s = step;
  while (d < 12 && std::fabs(s - std::round(s)) > 1e-6 * std::max(1.0, s)) {
    s *= 10;
    ++d;
  }
  return d;
}

// Indices of the points drawn: all when few; else per pixel column the first, lowest,
// highest and last point, in their order.
std::vector<size_t> thinned(const std::vector<std::pair<double, double>>& p, const LinearScale& xs,
                            double width) {
  std::vector<size_t> keep;
  if (double(p.size()) <= 2 * width) {
    keep.resize(p.size());
    for (size_t i = 0; i < p.size(); ++i) keep[i] = i;
    return keep;
  }
  size_t i = 0;
  while (i < p.size()) {
    const long column = std::lround(std::floor(xs(p[i].first)));
    size_t j = i, lo = i, hi = i;
    while (j < p.size() && std::lround(std::floor(xs(p[j].first))) == column) {
      if (p[j].second < p[lo].second) lo = j;
      if (p[j].second > p[hi].second) hi = j;
      ++j;
    }
    std::vector<size_t> column_keep = {i, lo, hi, j - 1};
    std::sort(column_keep.begin(), column_keep.end());
    column_keep.erase(std::unique(column_keep.begin(), column_keep.end()), column_keep.end());
    keep.insert(keep.end(), column_keep.begin(), column_keep.end());
    i = j;
  }
  return keep;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else if (c == '\'')
      o += "&#39;";
    else
      o += c;
  }
  return o;
}

std::vector<double> nice_ticks(double lo, double hi, int target, bool integer) {
  std::vector<double> ticks;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return ticks;
  const double parts = double(std::max(target, 1));
  const double raw = hi / parts - lo / parts;  // no overflow for any finite lo, hi
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double n = raw / mag;
  double step = n < 1.5 ? 1 : n < 2.25 ? 2 : n < 3.5 ? 2.5 : n < 7.5 ? 5 : 10;
  if (integer && step == 2.5 && mag <= 1) step = 2;
  step *= mag;
  if (integer) step = std::max(1.0, std::round(step));
  if (!std::isfinite(step) || step <= 0) return ticks;
  const double first = std::ceil(lo / step - 1e-9);
  for (double k = first; ticks.size() < size_t(10 * parts + 10); k += 1) {
    double v = k * step;
    if (v > hi + 1e-9 * step) break;
    if (std::fabs(v) < 1e-12 * step) v = 0;
    ticks.push_back(v);
  }
  return ticks;
}

std::string format_tick(double v, double step, bool si) {
  double scale = 1;
  const char* suffix = "";
  if (si) {
    const double m = std::max(std::fabs(v), step);
    if (m >= 1e9)
      scale = 1e9, suffix = "G";
    else if (m >= 1e6)
      scale = 1e6, suffix = "M";
    else if (m >= 1e3)
      scale = 1e3, suffix = "k";
  }
  std::ostringstream os;
  if (std::max(std::fabs(v), step) / scale >= 1e15) {  // fixed would print 300 digits
    os.precision(3);
    os << v / scale << (v == 0 ? "" : suffix);
    return os.str();
  }
  os.setf(std::ios::fixed);
  os.precision(decimals_of(step / scale));
  os << v / scale << (v == 0 ? "" : suffix);
  return os.str();
}

ChartArea chart_area(const LineChart& c) {
  return {c.x + kLeft, c.y + kTop, c.x + c.width - kRight, c.y + c.height - kBottom};
}

std::pair<LinearScale, LinearScale> chart_scales(const LineChart& c) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : c.series)
    for (const auto& [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x);
      y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;  // nothing to draw: an empty frame
  if (c.y_from_zero) y0 = std::min(y0, 0.0);
  if (x1 == x0) {
    const double d = c.x_integer ? 1 : std::max(std::fabs(x0) * 0.05, 1e-9);
    x0 -= d, x1 += d;
  }
  if (y1 == y0) {
    const double d = y0 != 0 ? std::fabs(y0) * 0.05 : 1;
    y0 = c.y_from_zero && y0 == 0 ? 0 : y0 - d, y1 += d;
  }
  const ChartArea a = chart_area(c);
  return {LinearScale{x0, x1, a.left, a.right}, LinearScale{y0, y1, a.bottom, a.top}};
}

std::string render_line_chart(const LineChart& c) {
  const ChartArea a = chart_area(c);
  const auto [xs, ys] = chart_scales(c);
  const double fl = a.left - kInset, fr = a.right + kInset, ft = a.top - kInset,
               fb = a.bottom + kInset;
  std::ostringstream s;
  s << "<g font-family='sans-serif' font-size='11' fill='#333'>";
  s << "<text x='" << num(fl) << "' y='" << num(c.y + 18) << "' font-size='13' font-weight='bold'>"
    << xml_escape(c.title) << "</text>";
  const auto yt = nice_ticks(ys.d0, ys.d1, 6);
  const double ystep = yt.size() > 1 ? yt[1] - yt[0] : std::fabs(ys.d1 - ys.d0);
  for (double t : yt) {
    const double y = ys(t);
    s << "<line x1='" << num(fl) << "' x2='" << num(fr) << "' y1='" << num(y) << "' y2='" << num(y)
      << "' stroke='#e6e6e6'/><text x='" << num(fl - 5) << "' y='" << num(y + 4)
      << "' text-anchor='end'>" << format_tick(t, ystep, c.y_si) << "</text>";
  }
  const auto xt = nice_ticks(xs.d0, xs.d1, 8, c.x_integer);
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1;
  for (double t : xt) {
    const double x = xs(t);
    s << "<line x1='" << num(x) << "' x2='" << num(x) << "' y1='" << num(ft) << "' y2='" << num(fb)
      << "' stroke='#f0f0f0'/><line x1='" << num(x) << "' x2='" << num(x) << "' y1='" << num(fb)
      << "' y2='" << num(fb + 4) << "' stroke='#999'/><text x='" << num(x) << "' y='"
      << num(fb + 16) << "' text-anchor='middle'>" << format_tick(t, xstep) << "</text>";
  }
  s << "<rect x='" << num(fl) << "' y='" << num(ft) << "' width='" << num(fr - fl) << "' height='"
    << num(fb - ft) << "' fill='none' stroke='#999'/>";
  s << "<text x='" << num((fl + fr) / 2) << "' y='" << num(c.y + c.height - 6)
    << "' text-anchor='middle'>" << xml_escape(c.x_label) << "</text>";
  const double ly = (ft + fb) / 2, lx = c.x + 14;
  s << "<text x='" << num(lx) << "' y='" << num(ly)
    << "' text-anchor='middle' transform='rotate(-90 " << num(lx) << " " << num(ly) << ")'>"
    << xml_escape(c.y_label) << "</text>";
  for (const auto& series : c.series) {
    if (series.points.empty()) continue;
    const auto keep = thinned(series.points, xs, a.right - a.left);
    s << "<polyline data-run='" << xml_escape(series.run) << "' data-series='"
      << xml_escape(series.series) << "' fill='none' stroke='" << series.colour
      << "' stroke-width='1.6' stroke-linejoin='round'"
      << (series.dashed ? " stroke-dasharray='6,4'" : "") << " points='";
    for (size_t k = 0; k < keep.size(); ++k) {
      const auto& [x, y] = series.points[keep[k]];
      s << (k ? " " : "") << num(xs(x)) << "," << num(ys(y));
    }
    s << "'><title>" << xml_escape(series.title) << "</title></polyline>";
    // A lone point is a marker even in a line series: a one-point polyline draws nothing.
    if ((series.markers && series.points.size() <= size_t(kMaxMarkers)) ||
        series.points.size() == 1)
      for (const auto& [x, y] : series.points)
        s << "<circle cx='" << num(xs(x)) << "' cy='" << num(ys(y)) << "' r='3' fill='"
          << series.colour << "'><title>" << xml_escape(series.title) << " step " << std::llround(x)
          << ": " << y << "</title></circle>";
  }
  s << "</g>";
  return s.str();
}

}  // namespace driftless::train
