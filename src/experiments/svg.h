// SVG figures for the report, written by hand (no plotting library): line charts and annotated heatmaps.
// Every figure has a title, labelled axes with units and a legend outside the plot area, so text never overlaps
// the data.
#pragma once
#include <cmath>
#include <string>
#include <vector>

namespace aah {

struct SvgSeries {
  std::string name;
  std::vector<double> x, y;  // same length; NaN y values are gaps
  std::vector<double> y_lo, y_hi;  // optional, same length: a vertical error bar per point (an interval)
  int color = -1;                  // palette index, so a regime keeps its colour across figures; -1: the series' place
};

struct SvgLineChart {
  std::string title, x_label, y_label;
  std::vector<SvgSeries> series;
  double x_from = 0;  // > 0: only x >= x_from is drawn, and the y range fits that part (a zoom)
  bool points = false;      // markers only, no lines (a scatter: one series per labelled point)
  double ref_y = NAN;       // finite: a dashed horizontal reference line there (e.g. 0 = no difference)
  double ref_x = NAN;       // finite: a dashed vertical reference line there (e.g. 1 = the same cost)
};
std::string svg_line_chart(const SvgLineChart& chart);

struct SvgHeatmap {
  std::string title, x_label, y_label;
  std::vector<std::string> rows, cols;  // labels
  std::vector<double> values;           // rows x cols, row-major; NaN: empty cell
  std::vector<std::string> cell_text;   // rows x cols, written in the cells ("" for none)
  double lo = 0, hi = 1;                // color scale range (lo: white, hi: dark blue)
  std::string scale_label;              // under the color bar
};
std::string svg_heatmap(const SvgHeatmap& map);

// "Nice" axis ticks covering [lo, hi]: steps of 1, 2 or 5 x 10^k, about `target` of them.
std::vector<double> svg_nice_ticks(double lo, double hi, int target = 6);
// Text for XML content and attributes: & < > " ' escaped.
std::string svg_escape(const std::string& s);

}  // namespace aah
