// Interleaved timing of configurations that are compared with each other: what every `aah bench` measures with.
//
// On a shared machine the speed of the same code drifts by 10-20% over minutes (other processes, steal time,
// clock frequency). Timing configuration A for a while and then B turns such a drift into a false A/B
// difference. Here the configurations (cases) run interleaved in one process, A B C A B C ...: each round runs
// every case once, in the given order, so a drift hits all of them alike, and a ratio is taken per round
// (A_i / B_i) before its median. Rounds go on until every spread has settled under a limit (after a minimum
// number of rounds), the time budget is spent or a maximum number of rounds is reached. Reported per case and
// per ratio: median, min and spread = interquartile range / median. A figure whose spread is over the limit is
// flagged: it is not a result (text output marks it with '!', --json says "flagged": true).
//
//   MeasureResult r = measure_interleaved({{"full", [&] { step(full); }}, {"aah", [&] { step(aah); }}}, opts);
//   SampleStats ratio = ratio_stats(r, 1, 0);  // aah / full, per round
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace aah {

struct MeasureOptions {
  int warmup_rounds = 1;  // untimed rounds first (first touch of buffers, caches, thread pools)
  int rounds_min = 5;     // timed rounds at least (even past the budget)
  int rounds_max = 50;    // timed rounds at most
  double budget_s = 60;   // no new round starts once it would end past this many seconds, warm-up included
  double spread = 0.10;   // stop when every spread is at most this; a spread above it is flagged
  // A case whose run takes less than this repeats within its sample, back to back, often enough to fill it (the
  // count is set from the last warm-up round's time, so it needs warmup_rounds >= 1); its sample is then the mean
  // time per run. A millisecond run is at the mercy of one preemption; a 50 ms sample averages it out. 0: one run
  // per sample. Only for cases that may run several times in a row (each run is prepared afresh, untimed).
  double min_sample_s = 0;
  // Ratios ratio_stats(i, j) whose spread must settle too (the cases' own spreads always count).
  std::vector<std::pair<int, int>> ratios;
  std::FILE* progress = nullptr;  // a line per timed round (e.g. stderr), or nothing
};

// One configuration. Cases run in the order given, in every round (warm-up rounds too), so a case may use what
// the case before it left behind (a decode after its prefill).
struct MeasureCase {
  MeasureCase(std::string name_, std::function<void()> run_, std::function<void()> prepare_ = {})
      : name(std::move(name_)), run(std::move(run_)), prepare(std::move(prepare_)) {}
  std::string name;
  std::function<void()> run;      // one sample: timed
  std::function<void()> prepare;  // optional: untimed, before every run (a fresh decoder, a fresh cache)
};

// Statistics of one figure over the rounds.
struct SampleStats {
  int n = 0;
  double median = 0, min = 0, max = 0, q25 = 0, q75 = 0;  // quantiles by linear interpolation
  double spread = 0;       // (q75 - q25) / median
  bool flagged = true;     // spread over the limit, or fewer than 3 samples: not a result
  std::vector<double> samples;  // in round order
};

struct MeasureResult {
  std::vector<std::string> names;  // per case
  std::vector<SampleStats> cases;  // per case: seconds per run
  std::vector<int> runs_per_sample;  // per case (MeasureOptions::min_sample_s)
  int rounds = 0;                  // timed rounds
  int warmup_rounds = 0;
  double seconds = 0;              // wall time of the comparison, warm-up included
  double spread_limit = 0.10;      // MeasureOptions::spread
  bool settled = false;            // stopped because every spread was under the limit
};

// Runs the cases interleaved (see the top of this file) and returns per-case statistics of their run times.
MeasureResult measure_interleaved(const std::vector<MeasureCase>& cases, const MeasureOptions& opts);

// Statistics of samples; flagged when the spread is over spread_limit or there are fewer than 3 samples.
SampleStats sample_stats(std::vector<double> samples, double spread_limit);
// Per-round ratio num_i / den_i (equal lengths), then its statistics.
SampleStats ratio_stats(const std::vector<double>& num, const std::vector<double>& den, double spread_limit);
// Per-round ratio of case i's time to case j's time.
SampleStats ratio_stats(const MeasureResult& r, int i, int j);
// Per-round rate work / seconds_i (tokens/s, FLOP/s from times).
SampleStats rate_stats(const SampleStats& seconds, double work, double spread_limit);
// Every value (median, min, max, quartiles, samples) times `scale` > 0; spread and flag unchanged (s -> ms).
SampleStats scaled(SampleStats s, double scale);
// Per-round sums of equally long sample lists (the fwd + bwd time of a round).
std::vector<double> per_round_sum(const std::vector<double>& a, const std::vector<double>& b);

// {"median", "min", "max", "spread", "n", "flagged"} (+ "samples" when asked).
nlohmann::json stats_json(const SampleStats& s, bool samples);
// "1575.1 (min 1540.2, spread 2.1%)", with "!" after it when flagged; `digits` after the decimal point.
std::string stats_text(const SampleStats& s, int digits);
// "!" for a flagged figure, "" otherwise (the text output's mark).
const char* flag_mark(const SampleStats& s);
// The footnote under text output that has a flagged figure.
void print_flag_note(double spread_limit);

// The options every `aah bench` takes: output form and the measurement.
struct BenchOptions {
  bool json = false;     // one JSON object per line instead of text
  bool samples = false;  // --json also carries every round's sample
  MeasureOptions measure;
};

}  // namespace aah
