// The report's figures (SVG, svg.h), in the order they appear: the headline trade-offs, loss by position, the
// training curves, the window-bucket heatmap (with its table) and per regime the final layer x head window map.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>

#include "core/check.h"
#include "experiments/report_content.h"
#include "experiments/report_stats.h"

namespace aah::report {

namespace {

void add_figure(ReportContent& c, const std::string& file, const std::string& caption, std::string svg) {
  c.figures.push_back({file, caption});
  c.svgs[file] = std::move(svg);
}

std::string safe_name(const std::string& s) {
  std::string o;
  for (char ch : s) o += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-') ? ch : '-';
  return o;
}

// Per regime the mean over seeds of a metrics.jsonl number at each logged step.
std::vector<SvgSeries> series_of(const SuiteRuns& s, const std::string& key) {
  std::vector<SvgSeries> ss;
  for (const auto& g : s.regimes) {
    std::map<int, std::vector<double>> by_step;
    for (const RunData* r : regime_runs(s.runs, g))
      for (const auto& j : r->lines)
        if (j.contains(key) && j[key].is_number()) by_step[j["step"].get<int>()].push_back(j[key].get<double>());
    SvgSeries series;
    series.name = g;
    for (auto& [step, v] : by_step) {
      series.x.push_back(step);
      series.y.push_back(mean_interval(v).mean);
    }
    ss.push_back(std::move(series));
  }
  return ss;
}

// Loss by position: per regime the mean over seeds, and (but for full) the paired Δ vs full with its interval.
void add_position_figures(const SuiteRuns& s, ReportContent& c, const std::string& seeds_note) {
  SvgLineChart pos_chart, pos_delta;
  pos_chart.title = "Validation loss by position in the context";
  pos_delta.title = "Δ validation loss vs full by position";
  pos_chart.x_label = pos_delta.x_label = "position of the predicted token (bucket start)";
  pos_chart.y_label = "validation loss (nats/token, mean over seeds)";
  pos_delta.y_label = "Δ loss vs full (nats, mean, 95% CI)";
  pos_delta.ref_y = 0;
  const size_t buckets = c.pos_starts.size();
  for (size_t k = 0; k < s.regimes.size(); k++) {
    const std::string& g = s.regimes[k];
    SvgSeries a, d;
    a.name = d.name = g;
    d.color = int(pos_chart.series.size());  // full has no Δ line: the others keep their colours of the other figures
    for (size_t i = 0; i < buckets; i++) {
      const PositionRow& p = c.positions[k * buckets + i];
      const MeanInterval &m = p.loss, &dm = p.delta;
      a.x.push_back(p.start), a.y.push_back(m.n ? m.mean : NAN);
      d.x.push_back(p.start), d.y.push_back(dm.n ? dm.mean : NAN);
      d.y_lo.push_back(dm.n >= 2 ? dm.lo : NAN), d.y_hi.push_back(dm.n >= 2 ? dm.hi : NAN);
    }
    pos_chart.series.push_back(a);
    if (g != "full" && s.have_full) pos_delta.series.push_back(d);
  }
  add_figure(c, "loss_by_position.svg",
             "Validation loss by position of the predicted token in the context" + seeds_note,
             svg_line_chart(pos_chart));
  if (s.have_full && !pos_delta.series.empty())
    add_figure(c, "loss_by_position_delta.svg",
               "Δ validation loss vs full by position (paired over seeds, 95% CI): where a long-range loss happens",
               svg_line_chart(pos_delta));
}

// Validation loss against training seconds: at each evaluation step, the mean over seeds of both.
SvgLineChart loss_by_time_chart(const SuiteRuns& s, const std::string& seeds_note) {
  SvgLineChart chart{"Validation loss against training time" + seeds_note,
                     "training wall-clock seconds (evaluation excluded)",
                     "validation loss (nats/token)",
                     {}};
  for (const auto& g : s.regimes) {
    std::map<int, std::pair<std::vector<double>, std::vector<double>>> by_step;
    for (const RunData* r : regime_runs(s.runs, g))
      for (const LossAtTime& p : r->curve)
        by_step[p.step].first.push_back(p.seconds), by_step[p.step].second.push_back(p.loss);
    SvgSeries sr;
    sr.name = g;
    for (auto& [step, v] : by_step) {
      const MeanInterval t = mean_interval(v.first), l = mean_interval(v.second);
      if (t.n == 0 || l.n == 0) continue;  // no usable time
      sr.x.push_back(t.mean), sr.y.push_back(l.mean);
    }
    chart.series.push_back(std::move(sr));
  }
  std::vector<double> full_final;
  for (const RunData* f : regime_runs(s.runs, "full")) full_final.push_back(f->train.at("val_loss"));
  if (s.have_full) chart.ref_y = mean_interval(full_final).mean;
  return chart;
}

// Window-bucket heatmap: regime x window, % of (layer, head, sequence) executions at evaluation; also the table.
std::string window_buckets_figure(const SuiteRuns& s, ReportContent& c) {
  std::vector<int> windows;  // every candidate window, and any other a run used
  for (const auto& r : s.runs)
    for (int w : r.cc.windows)
      if (std::find(windows.begin(), windows.end(), w) == windows.end()) windows.push_back(w);
  for (const auto& r : s.runs)
    for (auto& [w, f] : r.eval["window_fractions"].items()) {
      const int wi = std::atoi(w.c_str());
      if (std::find(windows.begin(), windows.end(), wi) == windows.end()) windows.push_back(wi);
    }
  std::sort(windows.begin(), windows.end());
  SvgHeatmap h;
  h.title = "Window buckets at evaluation";
  h.x_label = "window W (tokens)";
  h.y_label = "regime";
  h.scale_label = "% of executions";
  h.lo = 0, h.hi = 100;
  for (int w : windows) h.cols.push_back(std::to_string(w));
  Table& bucket_t = c.buckets;
  bucket_t.header = {"regime"};
  for (int w : windows) bucket_t.header.push_back("W=" + std::to_string(w));
  for (const auto& g : s.regimes) {
    h.rows.push_back(g);
    std::vector<std::string> row = {g};
    for (int w : windows) {
      std::vector<double> v;
      for (const RunData* r : regime_runs(s.runs, g))
        v.push_back(100.0 * r->eval["window_fractions"].value(std::to_string(w), 0.0));
      const double m = mean_interval(v).mean;
      h.values.push_back(m);
      h.cell_text.push_back(fixed(m, 1) + "%");
      row.push_back(fixed(m, 1) + "%");
    }
    bucket_t.rows.push_back(row);
  }
  c.window_buckets = {{"windows", windows}, {"table", bucket_t.rows}};
  return svg_heatmap(h);
}

// Regime g's final layer x head windows (its first run), as W / T.
std::string window_map_figure(const RunData& r, const std::string& g) {
  const json& map = r.eval["window_map"];
  SvgHeatmap h;
  h.title = str_cat("Final windows: ", g, " (seed ", r.seed, ")");
  h.x_label = "head";
  h.y_label = "layer";
  h.scale_label = "W / T";
  const int T = r.cfg.train.context;
  for (size_t l = 0; l < map.size(); l++) {  // shape and types checked by report_check_eval
    h.rows.push_back(std::to_string(l));
    if (l == 0)
      for (size_t k = 0; k < map[l].size(); k++) h.cols.push_back(std::to_string(k));
    for (const auto& w : map[l]) {
      h.values.push_back(double(w.get<int>()) / T);
      h.cell_text.push_back(std::to_string(w.get<int>()));
    }
  }
  h.lo = 0, h.hi = 1;
  return svg_heatmap(h);
}

}  // namespace

// Figures. Series are means over seeds at each logged step.
void add_figures(const SuiteRuns& s, ReportContent& c) {
  const bool have_full = s.have_full;
  const int max_step = int(s.runs[0].train.at("steps"));
  const std::string seeds_note = s.runs.size() > s.regimes.size() ? " (mean over seeds)" : "";
  if (!s.timing.is_null() && have_full)
    add_figure(c, "tradeoff_time.svg",
               "Headline: Δ validation loss vs full (paired over seeds, 95% CI) against the training step time ratio "
               "measured side by side (timing.json); below 0 is better than full, left of 1 is cheaper",
               svg_line_chart(c.by_time));
  if (have_full)
    add_figure(c, "tradeoff_work.svg",
               "Δ validation loss vs full (paired over seeds, 95% CI) against the attention work ratio (multiply-adds "
               "executed / full, mean over training)",
               svg_line_chart(c.by_work));
  if (!c.pos_starts.empty()) add_position_figures(s, c, seeds_note);
  add_figure(c, "val_loss.svg", "Validation loss over training" + seeds_note,
             svg_line_chart({"Validation loss" + seeds_note, "optimizer step", "validation loss (nats/token)",
                             series_of(s, "val_loss")}));
  add_figure(c, "val_loss_time.svg",
             "Validation loss against training wall-clock seconds" + seeds_note +
                 ": at each evaluation, the seconds of training before it, from the logs' tokens / (tokens/s), so "
                 "evaluation time is excluded (metrics.jsonl's elapsed_s would include the earlier evaluations)" +
                 (have_full ? "; dashed: full's final validation loss" : ""),
             svg_line_chart(loss_by_time_chart(s, seeds_note)));
  add_figure(c, "val_loss_late.svg", "Validation loss, second half of training (zoom)",
             svg_line_chart({"Validation loss, late training (zoom)", "optimizer step", "validation loss (nats/token)",
                             series_of(s, "val_loss"), max_step / 2.0}));
  add_figure(c, "acr.svg", "Attention coverage ratio (ACR) of the windows in force",
             svg_line_chart({"ACR of the windows in force", "optimizer step", "ACR (mean W/T, 1 = full attention)",
                             series_of(s, "attn_ratio")}));
  add_figure(c, "levels_used.svg", "Hierarchy levels used at the control updates",
             svg_line_chart({"Hierarchy levels used", "optimizer step", "levels used (mean over layers)",
                             series_of(s, "levels_used")}));
  add_figure(c, "window_buckets.svg", "Window-bucket frequencies at evaluation (regime x window)",
             window_buckets_figure(s, c));
  for (const auto& g : s.regimes)
    add_figure(c, "window_map_" + safe_name(g) + ".svg", str_cat("Final layer x head windows, ", g),
               window_map_figure(*regime_runs(s.runs, g)[0], g));
}

}  // namespace aah::report
