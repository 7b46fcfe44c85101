// Reading a suite directory for `aah report`: the run files of every DIR/runs/*/ (config.json, metrics.jsonl,
// eval.json, probe.json), suite.json and timing.json. The files are hostile input: every reader checks what the
// report later uses without further checks, and its errors name the file, the line and the key.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace aah {

// Whether suite.json lists (regime, seed) among its runs (a matched regime by its resolved name); true without lists.
bool report_suite_lists(const nlohmann::json& suite, const std::string& regime, int seed);

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

namespace report {

using json = nlohmann::json;

// One finished run: what its files say, and the numbers of the tables (definitions in the report's notes).
struct RunData {
  std::string name, regime;
  int seed = 0;
  Config cfg;
  ControllerConfig cc;
  std::vector<json> lines;  // metrics.jsonl lines with a step (events excluded)
  json eval;                // eval.json
  json probe;               // probe.json (`aah probe heads`, the suite writes it for full runs on synth), or null
  std::map<std::string, double> train;  // training-table numbers
  std::vector<LossAtTime> curve;        // validation loss against training seconds (report_loss_by_time)
  std::vector<int> nonfinite_steps;     // steps whose loss or gradient was not finite (skipped, or the run stopped)
};

// The suite as the report sees it: its finished runs (in name order) and its regimes (the suite's order, full first).
struct SuiteRuns {
  std::string dir;
  json suite;                           // suite.json, or {} without one
  std::vector<RunData> runs;            // the suite's own finished runs
  std::vector<std::string> unfinished;  // run directories without eval.json
  std::vector<std::string> regimes;     // those with a finished run
  bool have_full = false;               // whether "full" is among them
  json timing;                          // timing.json (read_timing), or null
};

// Reads DIR: every DIR/runs/<name>/ with an eval.json (unfinished ones are listed, not tabled), suite.json and
// timing.json. Runs that are not the suite's own are left out with a message on stderr.
SuiteRuns read_suite(const std::string& dir);

// j[key] as a number, or an error naming the file (and line, when > 0) and the key.
double number(const json& j, const char* key, const std::string& file, int line = 0);

// DIR/timing.json (aah bench maps --json), checked: regimes with pair ratio, train/eval ms statistics and, but
// for full, their ratios to full. Returns null when the file is absent.
json read_timing(const std::string& path);
// The timing entry of `regime`, or null.
json timing_of(const json& timing, const std::string& regime);

}  // namespace report
}  // namespace aah
