// The report's prose: the setup line, the notes under its sections and the definitions at its end, and the summary's
// line for a run that diverged.
#include <algorithm>
#include <cstdint>
#include <set>

#include "core/check.h"
#include "core/files.h"
#include "eval/far_copy.h"
#include "experiments/report_content.h"
#include "experiments/report_stats.h"
#include "model/weights.h"

namespace aah::report {

namespace {

// The matched baselines of suite.json ("fixed_matched" resolved), as a sentence for the setup line.
std::string matched_note(const json& suite) {
  if (!suite.contains("matched") || !suite["matched"].is_object()) return "";
  std::string o;
  for (const auto& [k, m] : suite["matched"].items())
    if (m.is_object() && m.contains("regime") && m["regime"].is_string() && m.contains("target_pair_ratio") &&
        m["target_pair_ratio"].is_number() && m.contains("pair_ratio") && m["pair_ratio"].is_number())
      o += str_cat(" ", m["regime"].get<std::string>(),
                   " is the matched-cost baseline: every head one window, chosen so "
                   "that its pair ratio (",
                   fixed(m["pair_ratio"].get<double>(), 4), ") is the closest to ",
                   m.value("matched_to", std::string("?")), "'s mean final pair ratio (",
                   fixed(m["target_pair_ratio"].get<double>(), 4), ").");
  return o;
}

// The pretrained start of a suite with one (SuitePreset::base): its base runs' retrieval accuracy by distance
// (DIR/base/full-s<seed>/eval.json, mean over the bases), as a sentence for the setup line; "" without bases.
std::string base_note(const std::string& dir, const std::vector<RunData>& runs) {
  std::set<int> seeds;
  for (const RunData& r : runs)
    if (!r.cfg.train.init_from.empty()) seeds.insert(r.seed);
  if (seeds.empty()) return "";
  std::map<std::pair<int, int>, std::vector<double>> acc;  // (lo, hi or -1) -> accuracy per base
  std::map<int, int> steps;  // seed -> the base's steps (a base that did not retrieve yet trained on)
  std::string restarted;     // bases that started again from a new initialization (suite.cpp: base restarts)
  int bases = 0;
  for (int seed : seeds) {
    const std::string base = str_cat(dir, "/base/full-s", seed), path = base + "/eval.json";
    if (!file_exists(path)) continue;
    const json ev = read_json_file(path);
    if (!ev.is_object()) fail("[report] ", path, ": not a JSON object");
    const Config bc = run_config_load(base);
    steps[seed] = bc.train.steps, bases++;
    if (bc.train.seed != seed)
      restarted += str_cat(restarted.empty() ? "" : ", ", "seed ", seed, " (train.seed ", bc.train.seed, ")");
    if (!ev.contains("retrieval") || !ev["retrieval"].is_object()) continue;
    const json& b = ev["retrieval"].value("buckets", json::array());
    if (!b.is_array()) fail("[report] ", path, ": retrieval.buckets is not an array");
    for (const json& k : b) {
      if (!k.is_object() || !k.contains("hi")) fail("[report] ", path, ": a retrieval bucket is not an object");
      if (number(k, "n", path) <= 0) continue;  // no question at this distance: no accuracy
      acc[{int(number(k, "lo", path)), k["hi"].is_null() ? -1 : int(number(k, "hi", path))}].push_back(
          number(k, "accuracy", path));
    }
  }
  if (bases == 0) return "";
  int fewest = INT32_MAX;
  for (const auto& [seed, n] : steps) fewest = std::min(fewest, n);
  std::string longer;  // the bases that trained on past the others until they retrieved
  for (const auto& [seed, n] : steps)
    if (n > fewest) longer += str_cat(longer.empty() ? "" : ", ", "seed ", seed, " ", n);
  std::string o = str_cat(" Every run fine-tuned from its seed's full-attention base (`base/full-s<seed>`, ", fewest,
                          " steps", longer.empty() ? "" : str_cat("; trained on until it retrieved: ", longer),
                          "; `train.init_from`): the regimes choose windows for heads trained with full attention.");
  if (!restarted.empty())
    o += str_cat(
        " Started again from a new initialization after the first did not retrieve (the failed ones kept in "
        "`base/full-s<seed>-failed<k>`): ",
        restarted, ".");
  if (!acc.empty()) {
    o += str_cat(" The bases' retrieval accuracy by DEF-ASK distance (mean of ", bases, "):");
    for (const auto& [range, v] : acc) {
      double m = 0;
      for (double x : v) m += x / double(v.size());
      o += str_cat(" ", range.first, range.second < 0 ? "+" : str_cat("-", range.second - 1), " ", fixed(m, 3), ";");
    }
    o.back() = '.';
  }
  return o;
}

// How the summary reads a paired difference from full: with a 95% interval and the equivalence bound (two or more
// seeds), or, from one seed, no claim at all.
std::string differences_note(bool several_seeds) {
  if (!several_seeds)
    return "One seed per regime: no interval, so no difference from full is claimed either way (each reads \"one seed: "
           "no claim\"). ";
  return "Differences from full are paired by seed (regime - full, same seed), with a 95% t-interval over the seeds; "
         "an interval that contains 0 reads \"no difference detected\"; beside every difference stands the equivalence "
         "bound the data support: \"equivalent within ±B\" where B = max(|low|, |high|) of the 90% t-interval, so two "
         "one-sided tests at 5% exclude any larger difference. One seed gives no interval: it reads \"one seed: no "
         "claim\". ";
}

// ", matrix products in bf16" when the runs trained at train.precision=bf16 (", in bf16 in n of m runs" if mixed).
std::string precision_note(const std::vector<RunData>& runs) {
  size_t bf16 = 0;
  for (const RunData& r : runs) bf16 += r.cfg.train.precision == "bf16";
  if (bf16 == 0) return "";
  if (bf16 == runs.size()) return ", matrix products in bf16 (train.precision=bf16)";
  return str_cat(", matrix products in bf16 in ", bf16, " of ", runs.size(), " runs (train.precision=bf16)");
}

}  // namespace

// "Preset `x`: ... Model: ... Training: ... Runs: n." with the matched baselines and the pretrained bases, if any.
std::string setup_text(const SuiteRuns& s) {
  const std::vector<RunData>& runs = s.runs;
  const json& suite = s.suite;
  const RunData& r0 = runs[0];
  const ModelConfig& m = r0.cfg.model;
  return str_cat("Preset `", suite.value("preset", std::string("?")), "`: ", suite.value("summary", std::string("")),
                 ". Model: ", m.num_hidden_layers, " layers, ", m.num_attention_heads, " heads x ", m.head_dim, " (",
                 m.num_key_value_heads, " KV heads), width ", m.hidden_size, ", vocabulary ", m.vocab_size,
                 ". Training: ", r0.cfg.train.steps, " steps of ", r0.cfg.train.batch_size, " x ", r0.cfg.train.context,
                 " tokens", precision_note(runs), ". Runs: ", runs.size(),
                 s.unfinished.empty() ? std::string() : str_cat(" finished (unfinished: ", s.unfinished.size(), ")"),
                 ".", matched_note(suite), base_note(s.dir, runs));
}

// The summary's preamble: how a paired difference reads, and where the time ratios come from.
std::string seeds_text(const SuiteRuns& s) {
  const json& timing = s.timing;
  bool several_seeds = false;
  for (const auto& g : s.regimes) several_seeds |= regime_runs(s.runs, g).size() >= 2;
  return str_cat(
      differences_note(several_seeds),
      "Time ratios come from timing.json: each regime's final "
      "window map timed side by side with full windows, interleaved in one process (`aah bench maps`); a ratio whose "
      "spread (IQR / median) is over ",
      timing.is_null() ? std::string("10%") : fixed(100 * timing.value("spread_limit", 0.1), 0) + "%",
      " is flagged '!' and is not a result.");
}

// Under the time side by side: where and how it was measured ("" without timing.json).
std::string timing_text(const json& timing) {
  if (timing.is_null()) return "";
  return str_cat("Measured on ", timing.value("cpu", std::string("?")), ", ", timing.value("threads", 0), " threads, ",
                 timing.value("rounds", 0),
                 " interleaved rounds; ms are medians. The "
                 "controller's own cost is not included (measured 0.1-0.2% of a step by `aah bench train "
                 "--regime`). These interleaved times, not the logs' tokens/s, compare the regimes' speed.\n");
}

// Under time to loss: what its seconds are (interleaved time from timing.json, or the logs' training time).
std::string time_to_loss_text(bool interleaved_time) {
  return interleaved_time ? "Training seconds are interleaved time: at each evaluation, the steps so far x the "
                            "regime's training step time "
                            "measured side by side with the others in one process (timing.json, median; its final "
                            "window map), x 1 / (1 - "
                            "the run's mean share of time spent measuring attention, for the coverage and copy "
                            "policies). So a run that "
                            "shared the machine with other work is not slower for it, and no run's time includes "
                            "evaluation. The target is "
                            "the final validation loss (training evaluation, train.eval_windows windows) of full's run "
                            "of the same seed; the "
                            "time to reach it is interpolated linearly between the evaluation before and the first at "
                            "or below it; the ratio "
                            "is to full's own time to that loss, per seed. At equal time: the run's final validation "
                            "loss minus full's loss "
                            "after as many seconds of training (interpolated between full's evaluations; same seed). A "
                            "regime whose windows "
                            "changed during training is timed at its final windows."
                          : "Training seconds exclude evaluation: at each evaluation, the run's training time so far, "
                            "summed over its log "
                            "intervals as tokens / (tokens/s) from metrics.jsonl (`aah train` times its throughput "
                            "between log lines, "
                            "leaving out the evaluation and the logging; elapsed_s would count the earlier "
                            "evaluations). The target is the "
                            "final validation loss (training evaluation, train.eval_windows windows) of full's run of "
                            "the same seed; the "
                            "time to reach it is interpolated linearly between the evaluation before and the first at "
                            "or below it; the ratio "
                            "is to full's own time to that loss, per seed. At equal time: the run's final validation "
                            "loss minus full's loss "
                            "after as many seconds of training (interpolated between full's evaluations; same seed), "
                            "so a cheaper regime is "
                            "compared with full stopped at the same cost. These are logged times (no timing.json "
                            "timing every regime): the "
                            "runs of a suite train one after another, so their times compare only as far as the "
                            "machine's load stayed the "
                            "same.";
}

// Under far copies: what a far copy, its control and the excess are.
std::string far_copy_text() {
  return str_cat(
      "A far copy at distance d: a token that the continuation of the closest earlier occurrence of the n-gram before "
      "it predicts (n = ",
      kFarCopyNgram,
      "), that occurrence d tokens back; a window <= d hides it. Control: tokens "
      "with no earlier occurrence in the window, matched to each bucket's copies by frequency class (floor(log2(count))"
      " over the evaluated tokens). Excess vs full: (copies' loss - control's loss) minus full's, paired by seed, mean "
      "± 95% half-width: above 0 when the regime made far copies harder than tokens it could not copy anyway.");
}

// The definitions at the report's end.
std::string definitions_text() {
  return "Definitions. Training table: val loss at the final step; ACR (mean W/T over layers and heads) and exact pair "
         "ratio (executed causal pairs / full causal pairs) of the windows in force at the final step; attention work "
         "ratio = multiply-adds the attention kernels executed / the same kernels with full windows, mean over the "
         "run; peak MB = peak resident memory of the training process. Inference table (`aah eval`): inference ACR = "
         "sum over windows of f_W * W / T, f_W the fraction of (layer, head, sequence) executions with window W; peak "
         "memory of the evaluation process. With two or more seeds, a cell reads mean ± half-width of the 95% "
         "t-interval; Δ is the mean paired difference regime - full over the seeds both have. The logs' tokens/s "
         "(training: median over logged intervals after the first; evaluation: after the first, warmup, batch) are in "
         "runs.csv, summary.csv and report.json, not in the tables: the runs of a suite train one after another on a "
         "machine that may be doing other things, so they compare poorly; the time side by side is the comparison.";
}

// A run whose non-finite steps are at least a tenth of its steps diverged: its numbers are those of the weights
// before the first.
std::string nonfinite_note(const RunData& r) {
  if (r.nonfinite_steps.empty()) return "";
  const int n = int(r.nonfinite_steps.size()), steps = std::max(1, r.cfg.train.steps);
  const int first = *std::min_element(r.nonfinite_steps.begin(), r.nonfinite_steps.end());
  if (10 * n >= steps)
    return str_cat("- **", r.name, "** diverged at step ", first, ": ", n, " of its ", steps,
                   " steps had a non-finite ",
                   "loss or gradient and were skipped (metrics.jsonl events), so its numbers are mostly those of the "
                   "weights before step ",
                   first, ": not a result of its regime.\n");
  return str_cat("- **", r.name, "**: ", n, " step", n > 1 ? "s" : "", " of ", steps,
                 " skipped as non-finite (first at ", "step ", first, ").\n");
}

}  // namespace aah::report
