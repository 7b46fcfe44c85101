// report.json: the suite, every run's numbers and validation curve, every table and section's numbers.
#include "experiments/report_render.h"
#include "experiments/report_stats.h"

namespace aah::report {

namespace {

// A run's numbers exactly as read or derived, with its validation loss against training seconds.
json run_json(const std::vector<RunData>& runs, const RunData& r) {
  json curve = json::array();
  for (const LossAtTime& p : r.curve)
    curve.push_back({{"step", p.step}, {"train_seconds", p.seconds}, {"val_loss", p.loss}});
  return {{"run", r.name},
          {"regime", r.regime},
          {"seed", r.seed},
          {"train", r.train},
          {"eval", r.eval},
          {"nonfinite_steps", r.nonfinite_steps},
          {"time",
           {{"train_seconds", train_seconds(r)},
            {"time_to_full_loss_s", time_to_full_loss(runs, r)},
            {"time_to_full_loss_ratio", time_to_full_loss_ratio(runs, r)},
            {"val_loss_curve", curve}}}};
}

json table_json(const Table& t) {
  return {{"header", t.header}, {"rows", t.rows}};
}

}  // namespace

std::string render_json(const SuiteRuns& s, const ReportContent& c) {
  json out = {{"suite", s.suite}, {"runs", json::array()}, {"regimes", c.regimes}, {"unfinished", s.unfinished}};
  for (const RunData& r : s.runs) out["runs"].push_back(run_json(s.runs, r));
  out["window_buckets"] = c.window_buckets;
  out["tables"] = {{"training", table_json(c.train)},
                   {"inference", table_json(c.eval)},
                   {"paired", table_json(c.paired)},
                   {"time_to_loss", table_json(c.ttl)}};
  out["time_to_loss"] = c.ttl_json;
  out["headline"] = c.headline;
  if (!s.timing.is_null()) out["timing"] = s.timing;
  if (!c.retrieval.regimes.empty()) out["retrieval"] = c.retrieval.regimes;
  if (!c.far.regimes.empty()) out["far_copy"] = c.far.regimes;
  if (!c.heads.heads.empty()) out["heads"] = c.heads.heads;
  return out.dump(2) + "\n";
}

}  // namespace aah::report
