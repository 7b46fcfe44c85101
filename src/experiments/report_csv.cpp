// The report's CSV files: runs.csv, summary.csv, val_loss_time.csv and loss_by_position.csv. Numbers are written
// to full precision (%.10g), a number that is not finite as an empty field.
#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "experiments/report_render.h"
#include "experiments/report_stats.h"

namespace aah::report {

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

std::string full_precision(double v) {
  if (!std::isfinite(v)) return "";
  char b[64];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

// runs.csv: one row per run, the numbers exactly as read or derived.
std::string runs_csv(const std::vector<RunData>& runs) {
  std::string csv = "run,regime,seed";
  for (const auto& c : kTrainColumns) csv += str_cat(",train_", c.key);
  for (const auto& c : kEvalColumns) csv += str_cat(",eval_", c.key);
  csv += ",nonfinite_steps,train_time_s,time_to_full_loss_s,time_to_full_loss_ratio\n";
  for (const auto& r : runs) {
    csv += str_cat(csv_field(r.name), ",", csv_field(r.regime), ",", r.seed);
    for (const auto& c : kTrainColumns) csv += str_cat(",", full_precision(value_of(r, c)));
    for (const auto& c : kEvalColumns) csv += str_cat(",", full_precision(value_of(r, c)));
    csv += str_cat(",", r.nonfinite_steps.size(), ",", full_precision(train_seconds(r)), ",",
                   full_precision(time_to_full_loss(runs, r)), ",", full_precision(time_to_full_loss_ratio(runs, r)),
                   "\n");
  }
  return csv;
}

// val_loss_time.csv: every run's validation loss at each evaluation, with its training seconds so far.
std::string val_loss_time_csv(const std::vector<RunData>& runs) {
  std::string csv = "run,regime,seed,step,train_time_s,val_loss\n";
  for (const auto& r : runs)
    for (const LossAtTime& p : r.curve)
      csv += str_cat(csv_field(r.name), ",", csv_field(r.regime), ",", r.seed, ",", p.step, ",",
                     full_precision(p.seconds), ",", full_precision(p.loss), "\n");
  return csv;
}

// summary.csv: regime,source,metric,n,mean,lo95,hi95.
std::string summary_csv(const std::vector<SummaryRow>& rows) {
  std::string csv = "regime,source,metric,n,mean,lo95,hi95\n";
  for (const SummaryRow& r : rows)
    csv += str_cat(csv_field(r.regime), ",", r.source, ",", csv_field(r.metric), ",", r.n, ",", full_precision(r.mean),
                   ",", full_precision(r.lo), ",", full_precision(r.hi), "\n");
  return csv;
}

// loss_by_position.csv: per regime and bucket start the mean over seeds, and the paired Δ vs full.
std::string loss_by_position_csv(const std::vector<PositionRow>& rows) {
  std::string csv = "regime,bucket_start,n,mean,lo95,hi95,delta_n,delta_mean,delta_lo95,delta_hi95\n";
  for (const PositionRow& p : rows) {
    const MeanInterval &m = p.loss, &dm = p.delta;
    csv += str_cat(csv_field(p.regime), ",", p.start, ",", m.n, ",", full_precision(m.mean), ",", full_precision(m.lo),
                   ",", full_precision(m.hi), ",", dm.n, ",", full_precision(dm.mean), ",", full_precision(dm.lo), ",",
                   full_precision(dm.hi), "\n");
  }
  return csv;
}

}  // namespace

CsvFiles render_csv(const SuiteRuns& s, const ReportContent& c) {
  return {runs_csv(s.runs), summary_csv(c.summary_rows), val_loss_time_csv(s.runs), loss_by_position_csv(c.positions)};
}

}  // namespace aah::report
