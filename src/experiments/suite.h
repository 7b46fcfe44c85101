// `aah suite`: one training run per (regime, seed) of a preset, each evaluated, then the report.
//
// OUT/
//   suite.json               preset, its --set assignments and the user's (a rerun must match them)
//   data/                    the preset's corpus (made once; --data uses an existing one instead)
//   runs/<regime>-s<seed>/   an ordinary run directory (aah train) plus eval.json (aah eval --json)
//   timing.json              the regimes' final window maps timed side by side (aah bench maps --json)
//   report.md, report.html, tables.csv, report.json, figures/*.svg
//
// Resumable: a run with eval.json is finished and skipped; a run with a checkpoint is resumed (bit-identically);
// anything else is started. Each run and each evaluation is a child process (`aah train`, `aah eval`), so every
// run's peak memory is its own and an interrupt (Ctrl-C) checkpoints the run in progress.
#pragma once
#include <string>
#include <vector>

namespace aah {

struct SuiteOptions {
  std::string preset;
  std::string out;
  std::string data;                 // optional: an existing data directory (train.bin, val.bin)
  std::vector<int> seeds;           // empty: the preset's
  std::vector<std::string> regimes;  // empty: the preset's
  std::vector<std::string> sets;    // on top of the preset's
  bool no_report = false;
  double timing_budget_s = -1;  // seconds of `aah bench maps` rounds after the runs (timing.json); 0: none,
                                // < 0: the preset's
  bool force = false;  // --out may be a directory of other files (never replacing them)
  int base_extend_steps = -1, base_max_steps = -1, base_restarts = -1;  // SuitePreset's; < 0: the preset's
};

// The preset regime "fixed_matched": every head one window W, W chosen when the suite reaches it so that the
// fixed window's exact pair ratio is closest to the mean final pair ratio of the suite's full_adaptive runs
// (recorded in suite.json's "matched"; its runs are named fixed_window_W-s<seed>).
double fixed_window_pair_ratio(int T, int w);  // sum_t min(t, w) / sum_t t, t = 1..T
int fixed_window_matching(int T, double target_pair_ratio);  // the w in [1, T] closest to the target (smallest on ties)

// The suite's ETA: seconds per run measured on the runs finished in this invocation (training and evaluation;
// before the first, extrapolated from the run in progress), times the runs left, plus the timing at the end.
struct SuiteEta {
  double finished_runs = 0, finished_seconds = 0;  // runs finished here (a resumed run counts as its share)
  double runs_left = 0;                            // not yet finished, the current one included
  double current_fraction = 0, current_seconds = 0;  // of the run in progress
  double tail_s = 0;                               // after the runs (the timing)
};
double suite_eta_seconds(const SuiteEta& e);  // NaN when nothing is measured yet

// Returns the exit code: 0, or the failing child's (130 after an interrupt).
int suite_run(const SuiteOptions& opt);

}  // namespace aah
