// aah suite, aah report, aah compare.
#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"
#include "core/check.h"
#include "experiments/compare.h"
#include "experiments/presets.h"
#include "experiments/report.h"
#include "experiments/suite.h"

namespace aah {

namespace {
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  for (size_t comma; (comma = s.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(s.substr(start, comma - start));
  out.push_back(s.substr(start));
  return out;
}
}  // namespace

void add_suite_commands(CLI::App& app, int& rc) {
  std::string presets;
  for (const auto& n : suite_preset_names())
    presets += str_cat("\n  ", n, std::string(12 - std::min<size_t>(11, n.size()), ' '), suite_preset(n).summary);
  auto* suite = app.add_subcommand(
      "suite",
      "Train every (regime, seed) of a preset side by side, evaluate each final checkpoint, write the report.\n"
      "Resumable: rerun the same command after an interruption; finished runs are skipped, interrupted ones "
      "resumed.\nPresets:" + presets);
  static SuiteOptions so;
  static std::string seeds, regimes;
  suite->add_option("--preset", so.preset, "Preset name (above)")->required();
  suite->add_option("--out", so.out, "Suite directory (runs/, data/, report.*)")->required();
  suite->add_option("--seeds", seeds, "Comma-separated seeds, e.g. 0,1,2 (default: the preset's)");
  suite->add_option("--regimes", regimes,
                    "Comma-separated regimes, e.g. full,shallow_freeze+control_interval_10 (default: the preset's)");
  suite->add_option("--set", so.sets, "Override a config key for every run (repeatable), e.g. train.steps=100");
  suite->add_option("--data", so.data, "Use this data directory (train.bin, val.bin) instead of the preset's corpus");
  suite->add_flag("--force", so.force,
                  "Let --out be a directory that holds other files (the suite writes beside them, never over them)");
  suite->add_flag("--no-report", so.no_report, "Skip the report (aah report DIR writes it later)");
  suite->add_option("--timing-budget", so.timing_budget_s,
                    "Seconds of side-by-side timing of the regimes' final window maps after the runs (aah bench maps "
                    "-> timing.json, the report's time columns); 0: none; default: the preset's (60 s, smoke 2 s)")
      ->check(kFiniteNumber & CLI::Range(0.0, 3600.0));
  suite->add_option("--base-extend", so.base_extend_steps,
                    "Synth presets with a base: a base that does not yet retrieve at the farthest distance (accuracy "
                    "< 0.95) trains on this many steps at a time, up to --base-max (default: the preset's; retrieval "
                    "6000; 0: never)")
      ->check(CLI::Range(0, 10'000'000));
  suite->add_option("--base-max", so.base_max_steps,
                    "The most steps a base trains while it does not retrieve (default: the preset's; retrieval 18000)")
      ->check(CLI::Range(0, 10'000'000));
  suite->add_option("--base-restarts", so.base_restarts,
                    "A base that still does not retrieve at --base-max starts again from a new initialization "
                    "(train.seed = seed + 1000 x attempt; the failed one kept as base/full-s<seed>-failed<attempt>), at "
                    "most this many times (default: the preset's; retrieval 2; 0: never)")
      ->check(CLI::Range(0, 100));
  suite->callback([&rc] {
    so.seeds.clear();
    so.regimes.clear();
    for (const auto& s : split_commas(seeds)) {
      char* end = nullptr;
      const long v = std::strtol(s.c_str(), &end, 10);
      if (s.empty() || *end || v < 0 || v > 1'000'000'000) fail("[suite] --seeds: '", s, "' is not a seed (0, 1, ...)");
      so.seeds.push_back(int(v));
    }
    for (const auto& r : split_commas(regimes))
      if (!r.empty()) so.regimes.push_back(r);
    rc = suite_run(so);
  });

  auto* report = app.add_subcommand(
      "report", "Rebuild a suite's report (report.md, report.html, runs.csv, summary.csv, report.json, figures/) "
                "from its run directories");
  static std::string dir;
  report->add_option("DIR", dir, "Suite directory (holds runs/)")->required();
  report->callback([&rc] {
    report_write(dir);
    rc = 0;
  });

  auto* compare = app.add_subcommand(
      "compare",
      "Two suites of the same experiment with one thing changed (e.g. --set train.precision=bf16), their runs paired\n"
      "by regime and seed: per regime the paired difference B - A of an eval.json number over the seeds, with 95% and\n"
      "90% intervals and the equivalence bound, and the config.json keys that differ between paired runs.\n"
      "Example: aah suite --preset main --regimes full --seeds 0,1,2,3,4 --out runs/fp32\n"
      "         aah suite --preset main --regimes full --seeds 0,1,2,3,4 --set train.precision=bf16 --out runs/bf16\n"
      "         aah compare runs/fp32 runs/bf16");
  static std::string cmp_a, cmp_b, cmp_metric = "val_loss";
  static bool cmp_json = false;
  compare->add_option("A", cmp_a, "Suite directory A (holds runs/)")->required();
  compare->add_option("B", cmp_b, "Suite directory B, compared against A")->required();
  compare->add_option("--metric", cmp_metric, "The eval.json number to compare (e.g. val_loss, val_ppl)")
      ->capture_default_str();
  compare->add_flag("--json", cmp_json, "One JSON object: every row with each seed's values in A and B");
  compare->callback([&rc] {
    const Comparison c = compare_suites(cmp_a, cmp_b, cmp_metric);
    if (cmp_json)
      std::printf("%s\n", compare_json(c).dump().c_str());
    else
      std::fputs(compare_text(c).c_str(), stdout);
    rc = 0;
  });
}

}  // namespace aah
