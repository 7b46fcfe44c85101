// `aah report DIR`: the suite's report, rebuilt from its run directories alone (config.json, metrics.jsonl,
// eval.json of every DIR/runs/*/), so it can be regenerated, or regenerated after adding seeds, at any time.
//
// DIR/report.md       tables (the paper's Table 4 and Table 6 plus our columns), paired differences, figures
// DIR/report.html     the same, self-contained (figures inline as SVG)
// DIR/runs.csv        one row per run, every number of the tables
// DIR/summary.csv     one row per regime: mean, 95% interval low and high of each number over seeds; retrieval rows:
//                     accuracy per distance bucket, and `kept` (mean = k / n, the Clopper-Pearson interval)
// DIR/val_loss_time.csv  every run's validation loss at each evaluation, with its training seconds so far
// DIR/report.json     all of it, with the per-step series of the figures
// DIR/figures/*.svg   validation loss over steps (and late zoom) and over training seconds, ACR, hierarchy levels
//                     used over steps; the window-bucket heatmap (regime x window); per regime the final layer x
//                     head window map
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/stats.h"  // mean_interval, t_quantile_975: the report's statistics

namespace aah {

// Whether `existing` (a report file's bytes) was written by aah report, judged against what it writes now (`now`):
// report.md's title line, report.html's title, report.json's keys, a CSV's header line. A user's file of the same
// name is not replaced.
bool report_owns_file(const std::string& existing, const std::string& now);
// Whether suite.json lists (regime, seed) among its runs (a matched regime by its resolved name); true without lists.
bool report_suite_lists(const nlohmann::json& suite, const std::string& regime, int seed);
void report_write(const std::string& dir);

// The readers of the run files (hostile input: errors name `name`, the line and the key). metrics.jsonl text:
// the lines with a step (events skipped), the numbers the report uses checked; the last must have val_loss.
// Event lines (non-finite steps, loss spikes) are left out; the steps of "nonfinite" events go to *nonfinite_steps.
std::vector<nlohmann::json> report_parse_metrics(const std::string& text, const std::string& name,
                                                 std::vector<int>* nonfinite_steps = nullptr);
// eval.json: the numbers, window_fractions (window -> fraction) and window_map (L rows of H windows >= 1).
void report_check_eval(const nlohmann::json& eval, const std::string& name);
// probe.json: heads [{layer, head, def_mass, accuracy_drop}], one per head of a layers x heads model.
void report_check_probe(const nlohmann::json& probe, int layers, int heads, const std::string& name);

// Time to loss. A run's validation loss against its training wall time: at each evaluation (a metrics line with
// val_loss), the seconds of training so far. They are summed over the log intervals as (tokens - the previous
// line's tokens) / tokens_per_s: `aah train` times its throughput between log lines with the evaluation and the
// line's writing left out, so the sum is training time only (optimizer steps, controller, coverage measurement),
// and it continues across a resume. (elapsed_s, by contrast, counts the earlier evaluations and restarts at 0 in a
// resumed process; it is used only when a line has no tokens figure.) Seconds are NaN when neither is usable.
struct LossAtTime {
  int step = 0;
  double seconds = 0, loss = 0;
};
std::vector<LossAtTime> report_loss_by_time(const std::vector<nlohmann::json>& lines);
// The first time `curve` reaches `target` (loss <= target): interpolated linearly between the evaluation before and
// the first at or below the target; the first evaluation's time when it is already there; NaN when never reached.
double report_time_to_loss(const std::vector<LossAtTime>& curve, double target);
// The loss of `curve` at `seconds` of training: interpolated linearly between the evaluations around it (an
// evaluation's own loss at its time); NaN before the first evaluation or past the last.
double report_loss_at_time(const std::vector<LossAtTime>& curve, double seconds);

}  // namespace aah
