// `aah suite`: one training run per (regime, seed) of a preset, each evaluated, then the report.
//
// OUT/
//   suite.json               preset, its --set assignments and the user's (a rerun must match them)
//   data/                    the preset's corpus (made once; --data uses an existing one instead)
//   runs/<regime>-s<seed>/   an ordinary run directory (aah train) plus eval.json (aah eval --json)
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
};

// Returns the exit code: 0, or the failing child's (130 after an interrupt).
int suite_run(const SuiteOptions& opt);

}  // namespace aah
