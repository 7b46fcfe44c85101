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
//
// The parts: report_read (the run files, checked), report_stats (numbers over seeds, time to loss),
// report_content (what the report says: tables, prose, figures; built by report_tables, report_distance,
// report_heads, report_figures, report_notes) and one renderer per format (report_markdown, report_html,
// report_csv, report_json).
#pragma once
#include <string>

#include "experiments/report_read.h"   // report_parse_metrics, report_check_eval, report_check_probe, LossAtTime
#include "experiments/report_stats.h"  // report_time_to_loss, report_loss_at_time
#include "experiments/stats.h"         // mean_interval, t_quantile_975: the report's statistics

namespace aah {

// Whether `existing` (a report file's bytes) was written by aah report, judged against what it writes now (`now`):
// report.md's title line, report.html's title, report.json's keys, a CSV's header line. A user's file of the same
// name is not replaced.
bool report_owns_file(const std::string& existing, const std::string& now);
void report_write(const std::string& dir);

}  // namespace aah
