// The report's main tables: training (the paper's Table 4), inference (Table 6), the paired differences from full,
// the time side by side with the headline (Δ validation loss against cost), time to loss, and loss by position.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "experiments/report_content.h"
#include "experiments/report_stats.h"

namespace aah::report {

namespace {

std::string shape_text(const std::vector<int>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); i++) o += (i ? "," : "") + std::to_string(s[i]);
  return o + "]";
}

// Table 4's descriptive columns.
std::vector<std::string> regime_columns(const RunData& r) {
  const ControllerConfig& c = r.cc;
  if (c.policy == WindowPolicy::off) return {"–", "–", "–"};
  if (c.policy != WindowPolicy::controller) return {str_cat("policy ", window_policy_name(c.policy)), "–", "–"};
  if (!c.grouping) return {"off", "–", c.joint_scorer ? "on" : "off"};
  return {str_cat("on (", topology_mode_name(c.topology), ")"), shape_text(c.shape), c.joint_scorer ? "on" : "off"};
}

// "0.912 (spread 2.1%)", "0.912 (spread 14.0%) !" when flagged.
std::string stat_cell(const json& s, int decimals) {
  return fixed(s["median"].get<double>(), decimals) + " (spread " + fixed(100 * s["spread"].get<double>(), 1) + "%)" +
         (s["flagged"].get<bool>() ? " !" : "");
}

// The paired difference of column `col` between regime g's runs and full's (same seeds).
MeanInterval paired_column(const SuiteRuns& s, const std::string& g, const Column& col) {
  return paired_over_seeds(regime_runs(s.runs, g), regime_runs(s.runs, "full"),
                           [&](const RunData& r) { return value_of(r, col); })
      .second;
}

// Regime g's row of the time side by side, when timing.json times it.
void add_time_row(ReportContent& c, const std::string& g, const json& t) {
  if (t.is_null()) return;
  c.time.rows.push_back({g, t.value("run", std::string("?")), fixed(t["pair_ratio"].get<double>(), 4),
                         stat_cell(t["train_ms"], 1), g == "full" ? "1" : stat_cell(t["train_ratio"], 3),
                         stat_cell(t["eval_ms"], 1), g == "full" ? "1" : stat_cell(t["eval_ratio"], 3)});
}

// The headline charts' axes: Δ validation loss vs full against the step time ratio, and against the work ratio.
void headline_charts(ReportContent& c) {
  c.by_time.title = "Quality against time";
  c.by_time.x_label = "training step time / full's (side by side, median)";
  c.by_work.title = "Quality against attention work";
  c.by_work.x_label = "attention work ratio (executed / full, mean over training)";
  for (SvgLineChart* chart : {&c.by_time, &c.by_work}) {
    chart->y_label = "Δ validation loss vs full (nats, mean, 95% CI)";
    chart->points = true, chart->ref_y = 0, chart->ref_x = 1;
  }
}

}  // namespace

void add_regime_tables(const SuiteRuns& s, ReportContent& c) {
  c.train.header = {"regime", "grouping", "hierarchy", "joint scorer", "context", "seeds"};
  for (const auto& col : kTrainColumns) c.train.header.push_back(col.header);
  c.eval.header = {"regime", "seeds"};
  for (const auto& col : kEvalColumns) c.eval.header.push_back(col.header);
  c.paired.header = {"regime", "seeds paired", "Δ training val loss", "Δ inference val loss", "Δ inference tokens/s"};
  for (const auto& g : s.regimes) {
    const auto rs = regime_runs(s.runs, g);
    std::vector<std::string> row = {g};
    for (const auto& text : regime_columns(*rs[0])) row.push_back(text);
    row.push_back(std::to_string(rs[0]->cfg.train.context));
    row.push_back(std::to_string(rs.size()));
    json jr = {{"regime", g}, {"seeds", json::array()}};
    for (const RunData* r : rs) jr["seeds"].push_back(r->seed);
    // One table's numeric cells for this regime: mean (and interval) over its seeds, also into JSON and CSV.
    auto add_cells = [&](const auto& columns, const char* source, std::vector<std::string>& cells) {
      for (const Column& col : columns) {
        std::vector<double> v;
        for (const RunData* r : rs) v.push_back(value_of(*r, col));
        const MeanInterval m = mean_interval(v);
        cells.push_back(cell(m, col.decimals));
        jr[source][col.key] = interval_json(m);
        c.summary_rows.push_back({g, source, col.key, m.n, m.mean, m.lo, m.hi});
      }
    };
    add_cells(kTrainColumns, "train", row);
    c.train.rows.push_back(row);
    std::vector<std::string> erow = {g, std::to_string(rs.size())};
    add_cells(kEvalColumns, "eval", erow);
    c.eval.rows.push_back(erow);
    if (s.have_full && g != "full") {
      const MeanInterval dt = paired_column(s, g, kTrainColumns[0]), de = paired_column(s, g, kEvalColumns[0]),
                         ds = paired_column(s, g, kEvalColumns[5]);
      c.paired.rows.push_back({g, std::to_string(dt.n), cell(dt, 4), cell(de, 4), cell(ds, 0)});
      jr["paired_vs_full"] = {{"train_val_loss", with_equivalence(interval_json(dt), dt)},
                              {"eval_val_loss", with_equivalence(interval_json(de), de)},
                              {"eval_tokens_per_s", with_equivalence(interval_json(ds), ds)}};
    }
    c.regimes.push_back(jr);
  }
}

// Time side by side (timing.json) and the headline: each regime's Δ validation loss against its cost.
void add_time_side_by_side(const SuiteRuns& s, ReportContent& c) {
  c.time.header = {"regime",        "timed map (run)",        "pair ratio", "train step ms", "step time ratio vs full",
                   "eval batch ms", "eval time ratio vs full"};
  headline_charts(c);
  for (const auto& g : s.regimes) {
    const json t = timing_of(s.timing, g);
    add_time_row(c, g, t);
    std::vector<double> work;
    for (const RunData* r : regime_runs(s.runs, g)) work.push_back(r->train.at("work_ratio"));
    const double work_ratio = mean_interval(work).mean;
    if (!s.have_full) continue;
    MeanInterval d;
    if (g == "full") {
      d.n = int(regime_runs(s.runs, g).size());
    } else {
      d = paired_column(s, g, kEvalColumns[0]);
    }
    const double time_ratio = t.is_null() ? NAN : g == "full" ? 1.0 : t["train_ratio"]["median"].get<double>();
    const bool time_flagged = !t.is_null() && g != "full" && t["train_ratio"]["flagged"].get<bool>();
    c.headline.push_back({{"regime", g},
                          {"delta_val_loss", with_equivalence(interval_json(d), d)},
                          {"step_time_ratio", t.is_null() ? json(nullptr) : json(time_ratio)},
                          {"step_time_ratio_flagged", time_flagged},
                          {"work_ratio", work_ratio}});
    for (auto [chart, x] : {std::pair{&c.by_time, time_ratio}, std::pair{&c.by_work, work_ratio}}) {
      SvgSeries p;
      p.name = g, p.x = {x}, p.y = {d.mean};
      if (d.n >= 2) p.y_lo = {d.lo}, p.y_hi = {d.hi};
      chart->series.push_back(p);
    }
    if (g == "full") continue;
    std::string time_text = "not timed (no timing.json)";
    if (!t.is_null())
      time_text = time_flagged ? str_cat("step time ratio ", fixed(time_ratio, 3), " flagged (spread ",
                                         fixed(100 * t["train_ratio"]["spread"].get<double>(), 1), "%: not a result)")
                               : str_cat("step time ", fixed(time_ratio, 3), " of full's");
    c.summary_md += str_cat("- **", g, "**: validation loss: ", verdict(d, 4, " nats"), "; ", time_text,
                            "; attention work ", fixed(work_ratio, 3), " of full's.\n");
  }
}

namespace {

// A regime's time-to-loss numbers over its seeds (mean_interval counts the finite values: the seeds that reached).
struct TimeToLoss {
  MeanInterval loss, secs, ttl, ratio,
      equal;  // final val loss, training s, time to full's loss, ratio, Δ at equal time
};

TimeToLoss time_to_loss_of(const SuiteRuns& s, const std::vector<const RunData*>& rs) {
  std::vector<double> loss, secs, ttl, ratio, equal;
  for (const RunData* r : rs) {
    loss.push_back(r->train.at("val_loss")), secs.push_back(train_seconds(*r));
    ttl.push_back(time_to_full_loss(s.runs, *r)), ratio.push_back(time_to_full_loss_ratio(s.runs, *r));
    equal.push_back(delta_at_equal_time(s.runs, *r));
  }
  return {mean_interval(loss), mean_interval(secs), mean_interval(ttl), mean_interval(ratio), mean_interval(equal)};
}

// The time-to-loss sentence of regime g (not full), whose runs rs have training seconds in the logs.
std::string time_to_loss_sentence(const SuiteRuns& s, const std::string& g, const std::vector<const RunData*>& rs,
                                  const TimeToLoss& t) {
  const MeanInterval &ml = t.loss, &ms = t.secs, &mt = t.ttl, &mr = t.ratio, &me = t.equal;
  // Full's own time to its final loss, on the seeds this regime reached it.
  std::vector<double> full_ttl;
  for (const RunData* r : rs)
    if (const RunData* f = full_run_of(s.runs, *r); f && std::isfinite(time_to_full_loss(s.runs, *r)))
      full_ttl.push_back(time_to_full_loss(s.runs, *f));
  const double full_s = mean_interval(full_ttl).mean;
  std::string o =
      mt.n == 0
          ? str_cat("- **", g, "** did not reach full's final validation loss in its ", fixed(ms.mean, 1),
                    " s of training (final ", fixed(ml.mean, 4), ").")
          : str_cat("- **", g, "** reached full's final validation loss after ", fixed(mt.mean, 1), " s of training",
                    size_t(mt.n) < rs.size() ? str_cat(" (", mt.n, " of ", rs.size(), " seeds)") : "", ", ",
                    fixed(mr.mean, 3), " of full's time (", fixed(full_s, 1), " s)",
                    mr.n >= 2 ? str_cat(", 95% CI [", fixed(mr.lo, 3), ", ", fixed(mr.hi, 3), "]") : "", ".");
  if (me.n > 0)
    o += str_cat(" At equal training time (its ", fixed(ms.mean, 1),
                 " s), its validation loss against full's: ", verdict(me, 4, " nats"), ".");
  return o + "\n";
}

}  // namespace

// Time to loss: does a regime reach full's final validation loss sooner (in training seconds)?
void add_time_to_loss(const SuiteRuns& s, ReportContent& c) {
  const bool have_full = s.have_full;
  c.ttl.header = {"regime",
                  "seeds",
                  "final val loss",
                  "training s",
                  "time to full's final val loss (s)",
                  "ratio to full's time",
                  "Δ val loss vs full at equal time"};
  for (const auto& g : s.regimes) {
    const auto rs = regime_runs(s.runs, g);
    const TimeToLoss t = time_to_loss_of(s, rs);
    const MeanInterval &ml = t.loss, &ms = t.secs, &mt = t.ttl, &mr = t.ratio, &me = t.equal;
    auto reached_cell = [&](const MeanInterval& m, int decimals) {
      if (!have_full) return std::string("–");
      if (m.n == 0) return std::string("not reached");
      return cell(m, decimals) + (size_t(m.n) < rs.size() ? str_cat(" (", m.n, " of ", rs.size(), " seeds)") : "");
    };
    // NaN: full trained for less time than this run (or no full): no loss of full's at that time.
    const std::string equal_cell = !have_full || g == "full" ? std::string("–")
                                   : me.n == 0               ? std::string("full trained less long")
                                                             : reached_cell(me, 4);
    c.ttl.rows.push_back(
        {g, std::to_string(rs.size()), cell(ml, 4), cell(ms, 1), reached_cell(mt, 1), reached_cell(mr, 3), equal_cell});
    c.ttl_json.push_back({{"regime", g},
                          {"seeds", rs.size()},
                          {"final_val_loss", interval_json(ml)},
                          {"train_seconds", interval_json_or_null(ms)},
                          {"time_to_full_loss_s", interval_json_or_null(mt)},
                          {"ratio_to_full", interval_json_or_null(mr)},
                          {"reached", have_full ? json(mt.n) : json(nullptr)},
                          {"delta_val_loss_at_equal_time", with_equivalence(interval_json_or_null(me), me)}});
    for (const auto& [metric, m] :
         {std::pair{"train_time_s", ms}, std::pair{"time_to_full_loss_s", mt}, std::pair{"time_to_full_loss_ratio", mr},
          std::pair{"delta_val_loss_at_equal_time", me}})
      c.summary_rows.push_back(
          {g, "time_to_loss", metric, m.n, m.n ? m.mean : NAN, m.n ? m.lo : NAN, m.n ? m.hi : NAN});
    if (!have_full || g == "full" || ms.n == 0) continue;  // no full, or no training time in the logs
    c.ttl_md += time_to_loss_sentence(s, g, rs, t);
  }
}

// Loss by position in the context (eval.json's loss_by_position): mean per bucket, and the paired Δ vs full.
void add_loss_by_position(const SuiteRuns& s, ReportContent& c) {
  std::vector<int>& pos_starts = c.pos_starts;  // the bucket starts of the first run that has them
  for (const auto& r : s.runs)
    if (r.eval.contains("loss_by_position") && pos_starts.empty())
      for (const auto& v : r.eval["loss_by_position"]["start"]) pos_starts.push_back(v.get<int>());
  auto pos_loss = [&](const RunData& r, size_t i) -> double {
    if (!r.eval.contains("loss_by_position")) return NAN;
    const json& lp = r.eval["loss_by_position"];
    if (i >= lp["start"].size() || lp["start"][i].get<int>() != pos_starts[i] || !lp["loss"][i].is_number()) return NAN;
    return lp["loss"][i].get<double>();
  };
  const auto full = regime_runs(s.runs, "full");
  for (const auto& g : s.regimes)
    for (size_t i = 0; i < pos_starts.size(); i++) {
      const auto [m, dm] =
          paired_over_seeds(regime_runs(s.runs, g), full, [&](const RunData& r) { return pos_loss(r, i); });
      c.positions.push_back({g, pos_starts[i], m, dm});
    }
}

}  // namespace aah::report
