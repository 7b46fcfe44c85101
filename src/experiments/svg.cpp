#include "experiments/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "core/check.h"

namespace aah {

namespace {

// Tableau 10: distinguishable, colour-blind friendlier than the default rainbow.
const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr double kCharWidth = 7.0;  // px per character at font-size 12 (sans-serif), for layout

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// Tick label: as many decimals as the tick step needs.
std::string tick_label(double v, double step) {
  const int decimals = std::max(0, int(-std::floor(std::log10(step) + 1e-9)));
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", decimals, std::fabs(v) < step * 1e-6 ? 0.0 : v);
  return b;
}

std::string text(double x, double y, const std::string& s, const std::string& extra = "") {
  return str_cat("<text x=\"", num(x), "\" y=\"", num(y), "\"", extra.empty() ? "" : " ", extra, ">", svg_escape(s),
                 "</text>\n");
}

// A series' colour: its own palette index, else its place in the chart.
const char* series_color(const SvgSeries& s, size_t k) { return kPalette[(s.color >= 0 ? size_t(s.color) : k) % 10]; }

bool has_error_bars(const SvgLineChart& c) {
  for (const auto& s : c.series)
    for (size_t i = 0; i < s.y_lo.size() && i < s.y_hi.size(); i++)
      if (std::isfinite(s.y_lo[i]) && std::isfinite(s.y_hi[i])) return true;
  return false;
}

std::string header(double w, double h) {
  return str_cat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", num(w), "\" height=\"", num(h),
                 "\" viewBox=\"0 0 ", num(w), " ", num(h),
                 "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n<rect width=\"100%\" "
                 "height=\"100%\" fill=\"white\"/>\n");
}

}  // namespace

std::string svg_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default: o += c;
    }
  }
  return o;
}

std::vector<double> svg_nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

namespace {

// A line chart's plot area (pixels) and the data range it shows.
struct Plot {
  double left = 78, top = 44, pw = 560, ph = 300;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  double X(double x) const { return left + (x - x0) / (x1 - x0) * pw; }
  double Y(double y) const { return top + ph - (y - y0) / (y1 - y0) * ph; }
};

// The data range over what is drawn (and the reference lines), with room around it.
Plot plot_of(const SvgLineChart& c, bool bars) {
  Plot p;
  double &x0 = p.x0, &x1 = p.x1, &y0 = p.y0, &y1 = p.y1;
  for (const auto& s : c.series)
    for (size_t i = 0; i < s.x.size(); i++) {
      if (s.x[i] < c.x_from || !std::isfinite(s.y[i])) continue;
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]);
      y0 = std::min(y0, s.y[i]), y1 = std::max(y1, s.y[i]);
      if (i < s.y_lo.size() && std::isfinite(s.y_lo[i])) y0 = std::min(y0, s.y_lo[i]);
      if (i < s.y_hi.size() && std::isfinite(s.y_hi[i])) y1 = std::max(y1, s.y_hi[i]);
    }
  if (!std::isfinite(x0)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (std::isfinite(c.ref_y)) y0 = std::min(y0, c.ref_y), y1 = std::max(y1, c.ref_y);
  if (std::isfinite(c.ref_x)) x0 = std::min(x0, c.ref_x), x1 = std::max(x1, c.ref_x);
  // Room around the outermost markers, and for the error bars of lines, which sit side by side around each x.
  if (c.points || bars) {
    const double xpad = std::max(1e-3, (x1 - x0) * (c.points ? 0.08 : 0.05));
    x0 -= xpad, x1 += xpad;
  }
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 - y0 < 1e-12) y0 -= 0.5, y1 += 0.5;
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  return p;
}

// The grid lines and tick labels of both axes.
std::string grid(const Plot& p) {
  const auto xt = svg_nice_ticks(p.x0, p.x1), yt = svg_nice_ticks(p.y0, p.y1);
  const double xs = xt.size() > 1 ? xt[1] - xt[0] : 1, ys = yt.size() > 1 ? yt[1] - yt[0] : 1;
  std::string o;
  for (double v : xt) {
    o += str_cat("<line x1=\"", num(p.X(v)), "\" y1=\"", num(p.top), "\" x2=\"", num(p.X(v)), "\" y2=\"",
                 num(p.top + p.ph), "\" stroke=\"#e4e4e4\"/>\n");
    o += text(p.X(v), p.top + p.ph + 17, tick_label(v, xs), "text-anchor=\"middle\"");
  }
  for (double v : yt) {
    o += str_cat("<line x1=\"", num(p.left), "\" y1=\"", num(p.Y(v)), "\" x2=\"", num(p.left + p.pw), "\" y2=\"",
                 num(p.Y(v)), "\" stroke=\"#e4e4e4\"/>\n");
    o += text(p.left - 6, p.Y(v) + 4, tick_label(v, ys), "text-anchor=\"end\"");
  }
  return o;
}

// Series k: its error bars (shifted by `shift` pixels), its line (gaps at NaN) and its markers.
std::string series_marks(const SvgLineChart& c, const Plot& p, size_t k, double shift, double cap) {
  const auto& s = c.series[k];
  const char* color = series_color(s, k);
  std::string o;
  for (size_t i = 0; i < s.x.size() && i < s.y_lo.size() && i < s.y_hi.size(); i++)
    if (s.x[i] >= c.x_from && std::isfinite(s.y_lo[i]) && std::isfinite(s.y_hi[i])) {
      const double x = p.X(s.x[i]) + shift;
      o += str_cat("<path stroke=\"", color, "\" stroke-width=\"1.5\" d=\"M", num(x), " ", num(p.Y(s.y_lo[i])), " V",
                   num(p.Y(s.y_hi[i])), " M", num(x - cap), " ", num(p.Y(s.y_lo[i])), " h", num(2 * cap), " M",
                   num(x - cap), " ", num(p.Y(s.y_hi[i])), " h", num(2 * cap), "\"/>\n");
    }
  std::string pts;
  int points = 0;
  auto flush = [&] {
    if (points > 1 && !c.points) o += str_cat("<polyline stroke=\"", color, "\" points=\"", pts, "\"/>\n");
    pts.clear();
    points = 0;
  };
  int drawn = 0;
  for (size_t i = 0; i < s.x.size(); i++) {
    if (s.x[i] < c.x_from || !std::isfinite(s.y[i])) {
      flush();
      continue;
    }
    pts += str_cat(num(p.X(s.x[i])), ",", num(p.Y(s.y[i])), " ");
    points++;
    drawn++;
  }
  flush();
  if (drawn <= 40 || c.points)  // markers where points are few (evaluation steps), so single points show too
    for (size_t i = 0; i < s.x.size(); i++)
      if (s.x[i] >= c.x_from && std::isfinite(s.y[i]))
        o += str_cat("<circle cx=\"", num(p.X(s.x[i])), "\" cy=\"", num(p.Y(s.y[i])), "\" r=\"", c.points ? "5" : "2.5",
                     "\" fill=\"", color, "\" stroke=\"none\"/>\n");
  return o;
}

// The legend right of the plot at x = lx: a marker or a line per series (what the plot draws), and its name.
std::string legend(const SvgLineChart& c, double lx, double top) {
  std::string o;
  for (size_t k = 0; k < c.series.size(); k++) {
    const double ly = top + 8 + 20 * double(k);
    const char* color = series_color(c.series[k], k);
    if (c.points)
      o += str_cat("<circle cx=\"", num(lx + 11), "\" cy=\"", num(ly), "\" r=\"5\" fill=\"", color, "\"/>\n");
    else
      o += str_cat("<line x1=\"", num(lx), "\" y1=\"", num(ly), "\" x2=\"", num(lx + 22), "\" y2=\"", num(ly),
                   "\" stroke=\"", color, "\" stroke-width=\"3\"/>\n");
    o += text(lx + 28, ly + 4, c.series[k].name);
  }
  return o;
}

// The clip path's id is unique per figure (a hash of its title): the HTML report inlines several figures.
std::string clip_id_of(const std::string& title) {
  uint32_t id_hash = 2166136261u;  // FNV-1a
  for (unsigned char ch : title) id_hash = (id_hash ^ ch) * 16777619u;
  char clip_id[24];
  std::snprintf(clip_id, sizeof clip_id, "plot-%08x", id_hash);
  return clip_id;
}

}  // namespace

std::string svg_line_chart(const SvgLineChart& c) {
  size_t longest = 0;
  for (const auto& s : c.series) longest = std::max(longest, s.name.size());
  const double bottom = 58;
  const bool bars = has_error_bars(c);
  const Plot p = plot_of(c, bars);
  const double left = p.left, top = p.top, pw = p.pw, ph = p.ph;
  const double legend_w = 40 + kCharWidth * double(longest);
  const double W = left + pw + 20 + legend_w, H = top + ph + bottom;

  std::string o = header(W, H);
  o += text(left + pw / 2, 24, c.title, "text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\"");
  o += str_cat("<rect x=\"", num(left), "\" y=\"", num(top), "\" width=\"", num(pw), "\" height=\"", num(ph),
               "\" fill=\"none\" stroke=\"#444\"/>\n");
  o += grid(p);
  o += text(left + pw / 2, H - 14, c.x_label, "text-anchor=\"middle\" font-size=\"13\"");
  o += text(18, top + ph / 2, c.y_label,
            str_cat("text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 18 ", num(top + ph / 2), ")\""));
  const std::string clip_id = clip_id_of(c.title);
  o += str_cat("<clipPath id=\"", clip_id, "\"><rect x=\"", num(left), "\" y=\"", num(top), "\" width=\"", num(pw),
               "\" height=\"", num(ph), "\"/></clipPath>\n<g clip-path=\"url(#", clip_id,
               ")\" fill=\"none\" stroke-width=\"2\">\n");
  auto dashed = [&](double xa, double ya, double xb, double yb) {
    o += str_cat("<line x1=\"", num(xa), "\" y1=\"", num(ya), "\" x2=\"", num(xb), "\" y2=\"", num(yb),
                 "\" stroke=\"#777\" stroke-width=\"1\" stroke-dasharray=\"5,4\"/>\n");
  };
  if (std::isfinite(c.ref_y)) dashed(left, p.Y(c.ref_y), left + pw, p.Y(c.ref_y));
  if (std::isfinite(c.ref_x)) dashed(p.X(c.ref_x), top, p.X(c.ref_x), top + ph);
  // Lines' error bars at one x would cover each other: each series' bars are shifted by a few pixels (a scatter's
  // points are one per series, at their own x).
  const double dodge = c.points || !bars ? 0 : std::min(8.0, 0.08 * pw / double(std::max<size_t>(1, c.series.size())));
  const double cap = dodge > 0 ? std::max(1.5, 0.4 * dodge) : 5;  // half the width of an error bar's ends
  for (size_t k = 0; k < c.series.size(); k++)
    o += series_marks(c, p, k, dodge * (double(k) - 0.5 * double(c.series.size() - 1)), cap);
  o += "</g>\n";
  o += legend(c, left + pw + 20, top);
  o += "</svg>\n";
  return o;
}

std::string svg_heatmap(const SvgHeatmap& m) {
  const size_t R = m.rows.size(), C = m.cols.size();
  AAH_CHECK(m.values.size() == R * C && m.cell_text.size() == R * C);
  size_t longest_row = 0, longest_col = 0;
  for (const auto& r : m.rows) longest_row = std::max(longest_row, r.size());
  for (const auto& c : m.cols) longest_col = std::max(longest_col, c.size());
  size_t longest_cell = 0;
  for (const auto& t : m.cell_text) longest_cell = std::max(longest_cell, t.size());
  const double cw = std::max({46.0, kCharWidth * double(longest_cell) + 10, kCharWidth * double(longest_col) + 8});
  const double ch = 26;
  const double left = 40 + kCharWidth * double(longest_row), top = 44;
  const double gw = cw * double(C), gh = ch * double(R);
  const double bar_x = left + gw + 24;
  const double bh = std::max(60.0, gh);
  const double W = std::max({bar_x + 80, bar_x + kCharWidth * double(m.scale_label.size()) + 10,
                             kCharWidth * 1.3 * double(m.title.size()) + 20});
  const double H = top + std::max(gh + 64, bh + 30);
  std::string o = header(W, H);
  o += text(left + gw / 2, 24, m.title, "text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\"");
  const double span = m.hi > m.lo ? m.hi - m.lo : 1;
  auto shade = [&](double v) {
    const double t = std::clamp((v - m.lo) / span, 0.0, 1.0);
    const int r = int(std::lround(255 + (8 - 255) * t)), g = int(std::lround(255 + (48 - 255) * t)),
              b = int(std::lround(255 + (107 - 255) * t));
    char buf[16];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
    return std::pair<std::string, bool>(buf, t > 0.55);  // (fill, dark: white text)
  };
  for (size_t i = 0; i < R; i++) {
    const double y = top + ch * double(i);
    o += text(left - 8, y + ch / 2 + 4, m.rows[i], "text-anchor=\"end\"");
    for (size_t j = 0; j < C; j++) {
      const double x = left + cw * double(j), v = m.values[i * C + j];
      const auto [fill, dark] = std::isfinite(v) ? shade(v) : std::pair<std::string, bool>("#f4f4f4", false);
      o += str_cat("<rect x=\"", num(x), "\" y=\"", num(y), "\" width=\"", num(cw), "\" height=\"", num(ch),
                   "\" fill=\"", fill, "\" stroke=\"white\"/>\n");
      if (!m.cell_text[i * C + j].empty())
        o += text(x + cw / 2, y + ch / 2 + 4, m.cell_text[i * C + j],
                  str_cat("text-anchor=\"middle\" fill=\"", dark ? "white" : "black", "\""));
    }
  }
  for (size_t j = 0; j < C; j++) o += text(left + cw * (double(j) + 0.5), top + gh + 16, m.cols[j], "text-anchor=\"middle\"");
  o += text(left + gw / 2, top + gh + 40, m.x_label, "text-anchor=\"middle\" font-size=\"13\"");
  o += text(14, top + gh / 2, m.y_label,
            str_cat("text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 14 ", num(top + gh / 2), ")\""));
  // Colour bar: lo at the bottom, hi at the top.
  const int steps = 20;
  for (int s = 0; s < steps; s++) {
    const double v = m.hi - span * (s + 0.5) / steps;
    o += str_cat("<rect x=\"", num(bar_x), "\" y=\"", num(top + bh * s / steps), "\" width=\"14\" height=\"",
                 num(bh / steps + 0.5), "\" fill=\"", shade(v).first, "\"/>\n");
  }
  o += str_cat("<rect x=\"", num(bar_x), "\" y=\"", num(top), "\" width=\"14\" height=\"", num(bh),
               "\" fill=\"none\" stroke=\"#444\"/>\n");
  const double step = m.hi > m.lo ? (m.hi - m.lo) / 10 : 1;
  o += text(bar_x + 20, top + 10, tick_label(m.hi, step));
  o += text(bar_x + 20, top + bh, tick_label(m.lo, step));
  o += text(bar_x, top + bh + 18, m.scale_label);
  o += "</svg>\n";
  return o;
}

}  // namespace aah
