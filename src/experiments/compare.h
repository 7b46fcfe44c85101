// `aah compare A B`: two suites that ran the same experiment with one thing changed (train.precision=bf16, another
// build, another CPU, other data), their runs paired by (regime, seed), and per regime the paired difference B - A
// of one number of eval.json (val_loss unless told) over the seeds: its mean, 95% and 90% t-intervals, the
// equivalence bound the 90% interval supports, and in how many seeds B is lower. It also says which config.json
// keys differ between paired runs, so that what is compared is on the page. Both suites are read by read_suite
// (report_read.h): every file is checked, and an error names the file and the key.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/stats.h"

namespace aah {

struct CompareRow {
  std::string regime;
  std::vector<int> seeds;    // the paired seeds, ascending
  std::vector<double> a, b;  // the metric per seed in A and in B
  MeanInterval diff;         // B - A: mean and 95% interval
  Interval diff90;           // its 90% interval
  double bound = 0;          // equivalence_bound90 (NaN with one seed)
  int b_lower = 0;           // seeds where B < A
};

struct Comparison {
  std::string a_dir, b_dir, metric;
  std::vector<CompareRow> rows;             // A's regime order
  std::vector<std::string> only_a, only_b;  // runs (regime-sSEED) without a partner
  // config.json keys (flattened, e.g. "train.precision") that differ in some pair: "key: A -> B" as JSON text
  // (the first pair's values), with "(in k of n pairs)" where not every pair differs.
  std::vector<std::string> differences;
};

// Reads both suites and pairs their finished runs; an error when either is not a suite, when no run pairs, or when a
// paired run's eval.json lacks the metric (naming the file).
Comparison compare_suites(const std::string& a_dir, const std::string& b_dir, const std::string& metric);
// What `aah compare` prints: the setup lines, one row per regime and a verdict: "B lower" / "B higher" where the
// 95% interval excludes 0, else "no difference detected (equivalent within +-bound)"; "one seed: no claim".
std::string compare_text(const Comparison& c);
// The same with every seed's values (aah compare --json).
nlohmann::json compare_json(const Comparison& c);

}  // namespace aah
