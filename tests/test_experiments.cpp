// The experiment suite and its report: statistics against tables, the smoke preset end to end (every number of
// the report re-derived here from the run files), figures that render, and a suite interrupted and resumed.
#include <signal.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "controller/controller_config.h"
#include "core/process.h"
#include "experiments/compare.h"
#include "experiments/presets.h"
#include "experiments/report.h"
#include "experiments/suite.h"
#include "experiments/svg.h"
#include "helpers.h"
#include "core/files.h"
#include "model/config.h"
#include "model/weights.h"

namespace aah {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

TEST(Stats, TQuantileMatchesTables) {
  // Student's t 0.975 quantiles (standard tables / scipy.stats.t.ppf(0.975, df)).
  const std::pair<int, double> known[] = {{1, 12.7062}, {2, 4.3027}, {4, 2.7764}, {10, 2.2281}, {30, 2.0423},
                                          {31, 2.0395}, {40, 2.0211}, {60, 2.0003}, {120, 1.9799}, {1000, 1.9623}};
  for (auto [df, t] : known) EXPECT_NEAR(t_quantile_975(df), t, 6e-4) << "df " << df;
}

TEST(Stats, MeanIntervalHandWorked) {
  // x = 1, 2, 3, 4: mean 2.5, s^2 = 5/3, standard error sqrt(5/12) = 0.645497, t(3) = 3.182 -> half-width 2.05397.
  const MeanInterval m = mean_interval({1, 2, 3, 4, NAN});
  EXPECT_EQ(m.n, 4);
  EXPECT_DOUBLE_EQ(m.mean, 2.5);
  EXPECT_NEAR(m.hi - m.mean, 3.182 * std::sqrt(5.0 / 12.0), 1e-12);
  EXPECT_NEAR(m.mean - m.lo, 2.05397, 1e-5);
  const MeanInterval one = mean_interval({7});
  EXPECT_EQ(one.n, 1);
  EXPECT_EQ(one.lo, 7);
  EXPECT_EQ(one.hi, 7);
  EXPECT_EQ(mean_interval({}).n, 0);
}

TEST(Svg, NiceTicksAndEscaping) {
  const std::vector<double> t = svg_nice_ticks(0, 1, 5);
  ASSERT_EQ(t.size(), 6u);
  for (size_t i = 0; i < t.size(); i++) EXPECT_NEAR(t[i], 0.2 * double(i), 1e-12);
  const std::vector<double> u = svg_nice_ticks(5.43, 6.91, 6);  // raw step 0.247 rounds up to 0.5: 5.5, 6.0, 6.5
  ASSERT_FALSE(u.empty());
  EXPECT_GE(u.front(), 5.43);
  EXPECT_LE(u.back(), 6.91);
  EXPECT_NEAR(u[1] - u[0], 0.5, 1e-12);
  EXPECT_EQ(svg_escape("a<b & \"c\">'d'"), "a&lt;b &amp; &quot;c&quot;&gt;&apos;d&apos;");
}

TEST(Presets, EveryPresetIsAValidConfigForEveryRegime) {
  for (const auto& name : suite_preset_names()) {
    const SuitePreset p = suite_preset(name);
    EXPECT_FALSE(p.regimes.empty()) << name;
    EXPECT_EQ(p.regimes.front(), "full") << name << ": full attention is the reference of the paired differences";
    for (const auto& r : p.regimes) {
      Config cfg;
      // The matched baselines become a fixed window or a coverage budget while the suite runs (suite.h).
      config_set(cfg, "aah.regime=" + (r == "fixed_matched"      ? std::string("fixed_window_1")
                                       : r == "coverage_matched" ? std::string("coverage_budget_500")
                                       : r == "copy_matched"     ? std::string("copy_budget_500")
                                                                 : r));
      for (const auto& s : p.sets) config_set(cfg, s);
      EXPECT_NO_THROW(config_validate(cfg)) << name << " " << r;
      EXPECT_NO_THROW(controller_config_of(cfg)) << name << " " << r;
    }
  }
  // The paper's protocol, as the issue writes it.
  const SuitePreset p = suite_preset("paper-4096");
  Config cfg;
  config_set(cfg, "aah.regime=full_adaptive");
  for (const auto& s : p.sets) config_set(cfg, s);
  const ControllerConfig cc = controller_config_of(cfg);
  EXPECT_EQ(cfg.train.context, 4096);
  EXPECT_EQ(cc.windows, (std::vector<int>{512, 1024, 2048, 4096}));
  EXPECT_EQ(cfg.train.steps, 10000);
  EXPECT_EQ(cfg.train.batch_size, 1);
  EXPECT_EQ(cc.control_interval, 5);
  EXPECT_DOUBLE_EQ(cc.feature_ema, 0.9);
  EXPECT_DOUBLE_EQ(cc.resolution_ema, 0.15);
  EXPECT_EQ(cfg.train.checkpoint_steps, (std::vector<int>{1000, 5000, 10000}));
  EXPECT_EQ(cfg.train.eval_interval, 1000);
  EXPECT_EQ(p.seeds, std::vector<int>{0});
  // Time to loss at long context (issue 16): the stdlib's long documents, context 8192, one seed by default.
  const SuitePreset l = suite_preset("long");
  Config lc;
  for (const auto& s : l.sets) config_set(lc, s);
  EXPECT_EQ(l.data, "code");
  EXPECT_GE(lc.train.context, 8192);
  EXPECT_EQ(lc.train.batch_size, 1);
  EXPECT_EQ(l.regimes, (std::vector<std::string>{"full", "full_adaptive", "coverage_matched"}));
  EXPECT_EQ(l.seeds, std::vector<int>{0});
  EXPECT_NE(test::error_of([] { suite_preset("nope"); }).find("known: smoke, cpu-small"), std::string::npos);
}

TEST(ReportReaders, HostileRunFilesAreErrorsNamingFileLineAndKey) {
  const std::string ok = R"({"step":10,"attn_ratio":1,"pair_ratio":1,"attn_work_ratio":1,"tokens_per_s":5,"peak_rss_mb":1,"val_loss":2})";
  std::vector<int> nonfinite;
  EXPECT_EQ(report_parse_metrics(ok + "\n" + R"({"step":11,"event":"nonfinite"})" + "\n" +
                                     R"({"step":12,"event":"loss_spike"})" + "\n" + ok + "\n",
                                 "m", &nonfinite)
                .size(),
            2u);
  EXPECT_EQ(nonfinite, std::vector<int>{11});
  using test::error_of;
  EXPECT_NE(error_of([&] { report_parse_metrics(ok + "\n{\"step\":1", "run/metrics.jsonl"); }).find("run/metrics.jsonl line 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { report_parse_metrics(R"({"step":1})", "m"); }).find("'attn_ratio' is missing"), std::string::npos);
  EXPECT_NE(error_of([&] { report_parse_metrics("[1,2]\n", "m"); }).find("m line 1: not a JSON object"), std::string::npos);
  EXPECT_NE(error_of([&] { report_parse_metrics(R"({"step":-3,"attn_ratio":1,"pair_ratio":1,"attn_work_ratio":1,"tokens_per_s":5,"peak_rss_mb":1})", "m"); })
                .find("'step' is not a step number"),
            std::string::npos);
  std::string unfinished = ok;
  unfinished.erase(unfinished.find(R"(,"val_loss":2)"), 13);
  EXPECT_NE(error_of([&] { report_parse_metrics(unfinished, "m"); }).find("no val_loss"), std::string::npos);
  EXPECT_NE(error_of([&] { report_parse_metrics("", "m"); }).find("no metrics lines"), std::string::npos);
  json e = json::parse(R"({"val_loss":1,"val_ppl":2.7,"inference_acr":1,"pair_ratio":1,"attn_work_ratio":1,
                           "tokens_per_s":9,"peak_rss_mb":3,"window_fractions":{"64":1},"window_map":[[64,64],[64,64]]})");
  EXPECT_NO_THROW(report_check_eval(e, "e"));
  json bad = e;
  bad["window_map"][1] = {64};
  EXPECT_NE(error_of([&] { report_check_eval(bad, "run/eval.json"); }).find("run/eval.json: window_map row 1"), std::string::npos);
  bad = e;
  bad["window_map"][0][1] = 0;
  EXPECT_NE(error_of([&] { report_check_eval(bad, "e"); }).find("holds 0, not a window"), std::string::npos);
  bad = e;
  bad["window_fractions"] = {{"x", 1}};
  EXPECT_NE(error_of([&] { report_check_eval(bad, "e"); }).find("window_fractions entry 'x'"), std::string::npos);
  bad = e;
  bad["val_loss"] = "low";
  EXPECT_NE(error_of([&] { report_check_eval(bad, "e"); }).find("'val_loss' is missing or not a number"), std::string::npos);
  // probe.json (aah probe heads): one entry per head of the run's model.
  const json probe = json::parse(R"({"heads":[{"layer":0,"head":0,"def_mass":0.5,"accuracy_drop":0.25},
                                              {"layer":0,"head":1,"def_mass":0.1,"accuracy_drop":0}]})");
  EXPECT_NO_THROW(report_check_probe(probe, 1, 2, "p"));
  EXPECT_NE(error_of([&] { report_check_probe(probe, 2, 2, "run/probe.json"); }).find("run/probe.json: 2 heads, but the run's model has 2 x 2"),
            std::string::npos);
  json badp = probe;
  badp["heads"][1]["head"] = 2;
  EXPECT_NE(error_of([&] { report_check_probe(badp, 1, 2, "p"); }).find("not {layer, head, def_mass, accuracy_drop}"), std::string::npos);
  badp = probe;
  badp["heads"][0].erase("def_mass");
  EXPECT_NE(error_of([&] { report_check_probe(badp, 1, 2, "p"); }).find("not {layer, head"), std::string::npos);
  EXPECT_NE(error_of([&] { report_check_probe(json::array(), 1, 2, "p"); }).find("p: not a probe"), std::string::npos);
}

// ---- end to end, through the binary

struct Child {
  int rc = 0;
  std::string err, out;
};

Child run_aah(const std::vector<std::string>& args) {
  // One thread per child: the models are tiny, and ctest runs tests two at a time on two cores (OpenMP teams
  // that outnumber the cores spin against each other). Results do not depend on the thread count.
  setenv("OMP_NUM_THREADS", "1", 1);
  std::vector<std::string> argv = {AAH_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  Child c;
  c.rc = process_run(argv,
                     {.output = &c.out, .on_stderr_line = [&](const std::string& line) { c.err += line + "\n"; }});
  return c;
}


std::vector<json> metrics_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<json> v;
  for (std::string line; std::getline(f, line);) {
    json j = json::parse(line);
    if (!j.contains("event")) v.push_back(j);
  }
  return v;
}

std::map<std::string, std::map<std::string, double>> read_runs_csv(const std::string& path) {
  std::ifstream f(path);
  std::string header;
  std::getline(f, header);
  std::vector<std::string> cols;
  std::stringstream hs(header);
  for (std::string c; std::getline(hs, c, ',');) cols.push_back(c);
  std::map<std::string, std::map<std::string, double>> rows;
  for (std::string line; std::getline(f, line);) {
    std::stringstream ls(line);
    std::vector<std::string> cells;
    for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
    if (!line.empty() && line.back() == ',') cells.push_back("");  // getline drops a last empty cell
    EXPECT_EQ(cells.size(), cols.size()) << line;
    for (size_t i = 2; i < cells.size() && i < cols.size(); i++)  // an empty cell: no number (e.g. not reached)
      rows[cells[0]][cols[i]] = cells[i].empty() ? NAN : std::stod(cells[i]);
  }
  return rows;
}

std::string fixed(double v, int decimals) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

// The tool that checks a figure renders (Debian librsvg2-bin, installed by scripts/setup.sh).
bool renders(const std::string& svg, const std::string& png) {
  std::string out;
  const int rc = process_run({"/usr/bin/rsvg-convert", svg, "-o", png},
                             {.on_stderr_line = [&](const std::string& l) { out += l; }});
  if (rc != 0) ADD_FAILURE() << svg << " does not render: " << out;
  std::ifstream f(png, std::ios::binary);
  char magic[8] = {};
  f.read(magic, 8);
  return rc == 0 && std::string(magic + 1, 3) == "PNG";
}

bool well_formed_xml(const std::string& path) {
  std::string out;
  const int rc = process_run({"/usr/bin/xmllint", "--noout", path},
                             {.on_stderr_line = [&](const std::string& l) { out += l + "\n"; }});
  if (rc != 0) ADD_FAILURE() << path << " is not well-formed XML: " << out;
  return rc == 0;
}

std::string full_precision_text(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

// Time to loss on hand-made metrics: the training seconds come from tokens / tokens_per_s (not elapsed_s, which here
// includes made-up evaluation time), the crossing of full's final loss is interpolated between evaluations, targets
// and ratios are paired by seed, and the report carries the numbers into report.json, runs.csv, summary.csv and the
// markdown table.
json metrics_line(int step, double tokens, double tps, double elapsed, double val_loss = NAN) {
  json j = {{"step", step},        {"attn_ratio", 1.0},  {"pair_ratio", 1.0}, {"attn_work_ratio", 1.0},
            {"tokens_per_s", tps}, {"peak_rss_mb", 1.0}, {"tokens", tokens},  {"elapsed_s", elapsed}};
  if (std::isfinite(val_loss)) j["val_loss"] = val_loss;
  return j;
}

// A hand-made finished run of a suite in dir/runs/<regime>-s<seed>: a tiny config, the metrics lines and an eval.json
// with every required field (plus `extra`).
void write_hand_run(const std::string& dir, const std::string& regime, int seed, const std::vector<json>& lines,
                    const json& extra = json::object()) {
  Config cfg;
  config_set(cfg, "aah.regime=" + regime);
  for (const char* s :
       {"vocab_size=64", "hidden_size=16", "intermediate_size=32", "num_hidden_layers=1", "num_attention_heads=2",
        "num_key_value_heads=2", "head_dim=8", "train.context=64", "train.steps=40"})
    config_set(cfg, s);
  config_set(cfg, "train.seed=" + std::to_string(seed));
  const std::string rd = dir + "/runs/" + regime + "-s" + std::to_string(seed);
  make_dirs(rd);
  write_file_atomic(rd + "/config.json", config_to_json(cfg).dump(2));
  std::string m;
  for (const json& j : lines) m += j.dump() + "\n";
  write_file_atomic(rd + "/metrics.jsonl", m);
  json ev = {{"val_loss", 1.0},        {"val_ppl", 2.7},      {"inference_acr", 1.0}, {"pair_ratio", 1.0},
             {"attn_work_ratio", 1.0}, {"tokens_per_s", 1.0}, {"peak_rss_mb", 1.0},   {"window_fractions", json::object()},
             {"window_map", {{64, 64}}}};
  ev.update(extra);
  write_file_atomic(rd + "/eval.json", ev.dump());
}

// The setup line names bf16 runs (train.precision=bf16): all of them, some of them, or says nothing for fp32.
TEST(Report, SetupLineNamesBf16Runs) {
  const test::TempDir tmp("bf16report");
  const std::string dir = tmp.path + "/suite";
  const std::vector<json> lines = {metrics_line(20, 2000, 100, 20, 5.0), metrics_line(40, 4000, 100, 40, 4.0)};
  write_hand_run(dir, "full", 0, lines);
  write_hand_run(dir, "full", 1, lines);
  auto setup_of_report = [&] {
    report_write(dir);
    const std::string md = read_file(dir + "/report.md");
    const size_t at = md.find("Training: ");
    return at == std::string::npos ? std::string() : md.substr(at, md.find(". Runs", at) - at);
  };
  EXPECT_EQ(setup_of_report(), "Training: 40 steps of 4 x 64 tokens");
  auto to_bf16 = [&](int seed) {
    const std::string path = dir + "/runs/full-s" + std::to_string(seed) + "/config.json";
    json c = json::parse(read_file(path));
    c["train"]["precision"] = "bf16";
    write_file_atomic(path, c.dump(2));
  };
  to_bf16(1);
  EXPECT_EQ(setup_of_report(),
            "Training: 40 steps of 4 x 64 tokens, matrix products in bf16 in 1 of 2 runs "
            "(train.precision=bf16)");
  to_bf16(0);
  EXPECT_EQ(setup_of_report(), "Training: 40 steps of 4 x 64 tokens, matrix products in bf16 (train.precision=bf16)");
}

// aah compare on hand-made suites: the paired differences over seeds re-derived by hand (seeds paired in seed
// order, not name order), a regime with one pair, unpaired runs, the config key that differs, and the errors.
TEST(Compare, PairedDifferencesOverSeedsHandWorked) {
  const test::TempDir tmp("compare");
  // suite directories named like the values that differ: only paths inside a suite leave out its directory
  const std::string a = tmp.path + "/fp32", b = tmp.path + "/bf16";
  auto run = [](const std::string& dir, const std::string& regime, int seed, double val_loss, bool bf16 = false) {
    const std::vector<json> lines = {metrics_line(20, 2000, 100, 20, 6.0), metrics_line(40, 4000, 100, 40, 5.0)};
    write_hand_run(dir, regime, seed, lines, {{"val_loss", val_loss}});
    const std::string path = dir + "/runs/" + regime + "-s" + std::to_string(seed) + "/config.json";
    json c = json::parse(read_file(path));
    c["train"]["init_from"] = dir + "/base/full-s" + std::to_string(seed);  // differs by the suite's directory alone
    if (bf16) c["train"]["precision"] = "bf16";
    write_file_atomic(path, c.dump(2));
  };
  // full: seeds 0, 1, 10 in both (A 5.0, 5.2, 4.9; B 5.01, 5.18, 4.95) and seed 3 in A only; full_adaptive: seed 0
  // in both, seed 1 in B only.
  run(a, "full", 0, 5.0), run(a, "full", 1, 5.2), run(a, "full", 10, 4.9), run(a, "full", 3, 5.5);
  run(b, "full", 0, 5.01, true), run(b, "full", 1, 5.18, true), run(b, "full", 10, 4.95, true);
  run(a, "full_adaptive", 0, 4.0), run(b, "full_adaptive", 0, 4.1, true), run(b, "full_adaptive", 1, 4.2, true);
  // as a user names them, relative ("fp32", "bf16"): the working directory is the temporary one while they are read
  const fs::path cwd = fs::current_path();
  fs::current_path(tmp.path);
  const Comparison c = compare_suites("fp32", "bf16", "val_loss");
  const Comparison c_abs = compare_suites(a, b, "val_loss");
  fs::current_path(cwd);
  EXPECT_EQ(c_abs.differences, c.differences);
  ASSERT_EQ(c.rows.size(), 2u);
  const CompareRow& full = c.rows[0];
  EXPECT_EQ(full.regime, "full");
  EXPECT_EQ(full.seeds, (std::vector<int>{0, 1, 10}));
  EXPECT_EQ(full.b, (std::vector<double>{5.01, 5.18, 4.95}));
  // d = B - A = 0.01, -0.02, 0.05: mean 0.013333, sd 0.0351188, se 0.0202759; t(0.975, 2) = 4.303 (the table's),
  // t(0.95, 2) = 2.919986
  EXPECT_EQ(full.diff.n, 3);
  EXPECT_NEAR(full.diff.mean, 0.0133333333333, 1e-9);
  EXPECT_NEAR(full.diff.lo, -0.0739137572, 1e-8);
  EXPECT_NEAR(full.diff.hi, 0.1005804239, 1e-8);
  EXPECT_NEAR(full.diff90.lo, 0.0133333333 - 2.9199855804 * 0.0202758751, 1e-8);
  EXPECT_NEAR(full.diff90.hi, 0.0133333333 + 2.9199855804 * 0.0202758751, 1e-8);
  EXPECT_NEAR(full.bound, 0.0725385, 1e-6);
  EXPECT_EQ(full.b_lower, 1);
  EXPECT_EQ(c.rows[1].regime, "full_adaptive");
  EXPECT_EQ(c.rows[1].diff.n, 1);
  EXPECT_NEAR(c.rows[1].diff.mean, 0.1, 1e-12);
  EXPECT_EQ(c.only_a, (std::vector<std::string>{"full-s3"}));
  EXPECT_EQ(c.only_b, (std::vector<std::string>{"full_adaptive-s1"}));
  EXPECT_EQ(c.differences, (std::vector<std::string>{"train.precision: \"fp32\" -> \"bf16\""}));
  const std::string text = compare_text(c);
  EXPECT_NE(text.find("differs in: train.precision: \"fp32\" -> \"bf16\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[-0.0739, +0.1006]"), std::string::npos) << text;
  EXPECT_NE(text.find("1 of 3  no difference detected (equivalent within +-0.0725)"), std::string::npos) << text;
  EXPECT_NE(text.find("one seed: no claim"), std::string::npos) << text;
  EXPECT_NE(text.find("only in A (not compared): full-s3\n"), std::string::npos) << text;
  const json j = compare_json(c);
  EXPECT_NEAR(j["rows"][0]["diff_lo95"].get<double>(), -0.0739137572, 1e-8);
  EXPECT_TRUE(j["rows"][1]["diff_lo95"].is_null());
  EXPECT_EQ(j["rows"][0]["a"], json({5.0, 5.2, 4.9}));

  // B clearly lower: the 95% interval excludes 0
  const std::string b2 = tmp.path + "/b2";
  run(b2, "full", 0, 4.50), run(b2, "full", 1, 4.71), run(b2, "full", 10, 4.39);
  const Comparison lower = compare_suites(a, b2, "val_loss");
  ASSERT_EQ(lower.rows.size(), 1u);
  EXPECT_LT(lower.rows[0].diff.hi, 0);
  EXPECT_EQ(lower.rows[0].b_lower, 3);
  EXPECT_NE(compare_text(lower).find("3 of 3  B lower"), std::string::npos);
  EXPECT_NE(compare_text(lower).find("differs in: nothing"), std::string::npos);

  // errors name what is wrong
  EXPECT_NE(test::error_of([&] { compare_suites(a, tmp.path + "/missing", "val_loss"); }).find(tmp.path + "/missing"),
            std::string::npos);
  const std::string no_metric = test::error_of([&] { compare_suites(a, b, "accuracy"); });
  EXPECT_NE(no_metric.find("/runs/full-s0/eval.json"), std::string::npos) << no_metric;
  EXPECT_NE(no_metric.find("'accuracy'"), std::string::npos) << no_metric;
  EXPECT_NE(test::error_of([&] { compare_suites(a, a + "/.", "val_loss"); }).find("the same suite directory"),
            std::string::npos);
  const std::string b3 = tmp.path + "/b3";
  run(b3, "full", 7, 5.0);
  EXPECT_NE(test::error_of([&] { compare_suites(a, b3, "val_loss"); }).find("no run of one has a partner"),
            std::string::npos);
  write_file_atomic(b + "/runs/full-s1/eval.json", "{\"val_loss\": ");
  EXPECT_NE(test::error_of([&] { compare_suites(a, b, "val_loss"); }).find(b + "/runs/full-s1/eval.json"),
            std::string::npos);
}

TEST(Report, TimeToLossHandWorked) {
  // full, seed 0: intervals of 1000 tokens at 100, 100, 50, 100 tokens/s = 10, 10, 20, 10 s; evaluations at steps 20
  // (t = 20 s, loss 5.0) and 40 (t = 50 s, loss 4.0). elapsed_s (20, 45, 55) would count 5 s of evaluation.
  const std::vector<json> full0 = {metrics_line(10, 1000, 100, 10), metrics_line(20, 2000, 100, 20, 5.0),
                                   metrics_line(30, 3000, 50, 45), metrics_line(40, 4000, 100, 55, 4.0)};
  const std::vector<LossAtTime> c = report_loss_by_time(full0);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].step, 20);
  EXPECT_DOUBLE_EQ(c[0].seconds, 20);
  EXPECT_DOUBLE_EQ(c[1].seconds, 50);
  EXPECT_DOUBLE_EQ(c[1].loss, 4.0);
  EXPECT_DOUBLE_EQ(report_time_to_loss(c, 4.0), 50);  // its own final loss, reached at its last evaluation
  EXPECT_DOUBLE_EQ(report_time_to_loss(c, 4.5), 35);  // halfway from 5.0 at 20 s to 4.0 at 50 s
  EXPECT_DOUBLE_EQ(report_time_to_loss(c, 6.0), 20);  // already below at the first evaluation
  EXPECT_TRUE(std::isnan(report_time_to_loss(c, 3.9)));
  EXPECT_DOUBLE_EQ(report_loss_at_time(c, 35), 4.5);  // halfway from 5.0 at 20 s to 4.0 at 50 s
  EXPECT_DOUBLE_EQ(report_loss_at_time(c, 20), 5.0);
  EXPECT_DOUBLE_EQ(report_loss_at_time(c, 50), 4.0);
  EXPECT_TRUE(std::isnan(report_loss_at_time(c, 10)));  // before the first evaluation
  EXPECT_TRUE(std::isnan(report_loss_at_time(c, 51)));  // past the last
  // The other regime, seed 0: losses 4.6 (10 s), 3.8 (20 s), 3.9 (35 s). It first reaches 4.0 between 10 and 20 s:
  // 10 + (4.6 - 4.0) / (4.6 - 3.8) * 10 = 17.5 s (not at the later 3.9), 17.5 / 50 = 0.35 of full's time.
  const std::vector<json> fixed0 = {metrics_line(10, 1000, 100, 10, 4.6), metrics_line(20, 2000, 100, 22, 3.8),
                                    metrics_line(30, 3000, 100, 34), metrics_line(40, 4000, 200, 40, 3.9)};
  EXPECT_NEAR(report_time_to_loss(report_loss_by_time(fixed0), 4.0), 17.5, 1e-12);
  // Without a tokens figure the seconds are elapsed_s; a line whose tokens go back does not count them either; an
  // elapsed_s that goes back (a resumed process) leaves the time unknown.
  std::vector<json> no_tokens = full0;
  for (json& j : no_tokens) j.erase("tokens");
  EXPECT_DOUBLE_EQ(report_loss_by_time(no_tokens)[1].seconds, 55);
  std::vector<json> back = full0;
  back[2]["tokens"] = 500;
  EXPECT_DOUBLE_EQ(report_loss_by_time(back)[0].seconds, 20);
  back[3]["elapsed_s"] = 5;
  EXPECT_TRUE(std::isnan(report_loss_by_time(back)[1].seconds));

  // The report, on a hand-made suite of two seeds. Seed 1: full evaluates 5.2 at 20 s and 4.2 at 40 s (target 4.2,
  // its time 40 s); fixed_window_16 4.5 at 10 s and 4.0 at 30 s: 10 + (4.5 - 4.2) / (4.5 - 4.0) * 20 = 22 s, ratio
  // 0.55. random_window does not reach 4.0 on seed 0 and is at 4.1 <= 4.2 at its first evaluation (20 s) on seed 1.
  const test::TempDir tmp("ttl");
  const std::string dir = tmp.path + "/suite";
  auto add_run = [&](const std::string& regime, int seed, const std::vector<json>& lines) {
    write_hand_run(dir, regime, seed, lines);
  };
  add_run("full", 0, full0);
  add_run("full", 1, {metrics_line(20, 2000, 100, 20, 5.2), metrics_line(40, 4000, 100, 45, 4.2)});
  add_run("fixed_window_16", 0, fixed0);
  add_run("fixed_window_16", 1, {metrics_line(20, 2000, 200, 10, 4.5), metrics_line(40, 4000, 100, 35, 4.0)});
  add_run("random_window", 0, {metrics_line(20, 2000, 100, 20, 4.5), metrics_line(40, 4000, 100, 45, 4.1)});
  add_run("random_window", 1, {metrics_line(20, 2000, 100, 20, 4.1), metrics_line(40, 4000, 100, 45, 4.0)});
  report_write(dir);
  const json rep = json::parse(read_file(dir + "/report.json"));
  ASSERT_EQ(rep["time_to_loss"].size(), 3u);
  const json& f = rep["time_to_loss"][0];
  EXPECT_EQ(f["regime"], "full");
  EXPECT_DOUBLE_EQ(f["time_to_full_loss_s"]["mean"].get<double>(), 45);  // 50 and 40
  EXPECT_DOUBLE_EQ(f["ratio_to_full"]["mean"].get<double>(), 1);
  EXPECT_DOUBLE_EQ(f["train_seconds"]["mean"].get<double>(), 45);
  const json& x = rep["time_to_loss"][1];
  EXPECT_EQ(x["regime"], "fixed_window_16");
  EXPECT_EQ(x["reached"], 2);
  EXPECT_DOUBLE_EQ(x["final_val_loss"]["mean"].get<double>(), (3.9 + 4.0) / 2);
  EXPECT_DOUBLE_EQ(x["train_seconds"]["mean"].get<double>(), (35 + 30) / 2.0);
  EXPECT_NEAR(x["time_to_full_loss_s"]["mean"].get<double>(), (17.5 + 22) / 2, 1e-12);
  EXPECT_NEAR(x["ratio_to_full"]["mean"].get<double>(), (0.35 + 0.55) / 2, 1e-12);
  // Two values: half-width t(1) * |a - b| / 2.
  EXPECT_NEAR(x["ratio_to_full"]["hi95"].get<double>() - 0.45, 12.706 * 0.2 / 2, 1e-9);
  EXPECT_NEAR(x["time_to_full_loss_s"]["hi95"].get<double>() - 19.75, 12.706 * 4.5 / 2, 1e-9);
  const json& y = rep["time_to_loss"][2];
  EXPECT_EQ(y["regime"], "random_window");
  EXPECT_EQ(y["reached"], 1);
  EXPECT_DOUBLE_EQ(y["time_to_full_loss_s"]["mean"].get<double>(), 20);
  EXPECT_DOUBLE_EQ(y["ratio_to_full"]["mean"].get<double>(), 0.5);
  // At equal time. fixed_window_16 seed 0: 3.9 after 35 s, full seed 0 at 35 s: 4.5, so -0.6; seed 1: 4.0 after
  // 30 s, full seed 1 at 30 s (5.2 at 20 s, 4.2 at 40 s): 4.7, so -0.7. random_window: 4.1 - (5.0 - 20 / 30) and
  // 4.0 - 4.2, both after 40 s. Full against itself: 0.
  EXPECT_NEAR(x["delta_val_loss_at_equal_time"]["mean"].get<double>(), -0.65, 1e-12);
  EXPECT_NEAR(x["delta_val_loss_at_equal_time"]["hi95"].get<double>() + 0.65, 12.706 * 0.1 / 2, 1e-9);
  EXPECT_NEAR(y["delta_val_loss_at_equal_time"]["mean"].get<double>(), (4.1 - (5.0 - 20.0 / 30) - 0.2) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(f["delta_val_loss_at_equal_time"]["mean"].get<double>(), 0);
  // The same numbers per run in runs.csv (not reached: an empty cell) and in the markdown table.
  const std::string runs_csv = read_file(dir + "/runs.csv");
  EXPECT_NE(runs_csv.find(",train_time_s,time_to_full_loss_s,time_to_full_loss_ratio\n"), std::string::npos);
  EXPECT_NE(runs_csv.find(",35,17.5,0.35\n"), std::string::npos) << runs_csv;
  EXPECT_NE(runs_csv.find(",30,22,0.55\n"), std::string::npos) << runs_csv;
  EXPECT_NE(runs_csv.find("random_window-s0,random_window,0,"), std::string::npos);
  EXPECT_NE(runs_csv.find(",40,,\n"), std::string::npos) << runs_csv;
  EXPECT_NE(read_file(dir + "/summary.csv").find("fixed_window_16,time_to_loss,time_to_full_loss_ratio,2,0.45,"),
            std::string::npos);
  EXPECT_NE(read_file(dir + "/val_loss_time.csv").find("fixed_window_16-s0,fixed_window_16,0,20,20,3.8\n"),
            std::string::npos);
  const std::string md = read_file(dir + "/report.md");
  EXPECT_NE(md.find("| fixed_window_16 | 2 | " + fixed(3.95, 4) + " ± " + fixed(12.706 * 0.1 / 2, 4) + " | " +
                    fixed(32.5, 1) + " ± " + fixed(12.706 * 5 / 2, 1) + " | " +
                    fixed(x["time_to_full_loss_s"]["mean"].get<double>(), 1) + " ± " + fixed(12.706 * 4.5 / 2, 1) +
                    " | " + fixed(0.45, 3) + " ± " + fixed(12.706 * 0.2 / 2, 3) + " |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| random_window | 2 | " + fixed(4.05, 4) + " ± " + fixed(12.706 * 0.1 / 2, 4) + " | " +
                    fixed(40, 1) + " ± 0.0 | 20.0 (1 of 2 seeds) | 0.500 (1 of 2 seeds) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("- **fixed_window_16** reached full's final validation loss after " +
                    fixed(x["time_to_full_loss_s"]["mean"].get<double>(), 1) +
                    " s of training, 0.450 of full's time (45.0 s), 95% CI [" + fixed(0.45 - 12.706 * 0.1, 3) + ", " +
                    fixed(0.45 + 12.706 * 0.1, 3) + "]. At equal training time (its 32.5 s), its validation loss "
                    "against full's: lower by 0.6500 nats (95% CI [" + fixed(-0.65 - 12.706 * 0.05, 4) + ", " +
                    fixed(-0.65 + 12.706 * 0.05, 4) + "], equivalent within ±" + fixed(0.65 + 6.3138 * 0.05, 4) +
                    " nats).\n"),
            std::string::npos)
      << md;
  // Full's time in the sentence is on the seeds reached: seed 1's 40 s.
  EXPECT_NE(md.find("- **random_window** reached full's final validation loss after 20.0 s of training (1 of 2 seeds), "
                    "0.500 of full's time (40.0 s)."),
            std::string::npos)
      << md;
  EXPECT_TRUE(fs::exists(dir + "/figures/val_loss_time.svg"));
  EXPECT_NE(md.find("These are logged times"), std::string::npos);

  // With timing.json timing every regime, the curves are in interleaved time: step x the regime's median step time.
  // full 1 s per step: seed 0 evaluates 5.0 at 20 s and 4.0 at 40 s; seed 1 5.2 at 20 s, 4.2 at 40 s (full's times
  // to its own loss: 40 s both). fixed_window_16 0.5 s per step: seed 0 4.6 at 5 s, 3.8 at 10 s, so 4.0 at
  // 5 + 0.6 / 0.8 x 5 = 8.75 s (ratio 0.21875); seed 1 4.5 at 10 s, 4.0 at 20 s, so 4.2 at 10 + 0.3 / 0.5 x 10 = 16 s
  // (ratio 0.4).
  auto stats = [](double median) { return json{{"median", median}, {"spread", 0.01}, {"flagged", false}}; };
  json timing = {{"regimes", json::array()}};
  for (auto [g, ms] : {std::pair{"full", 1000.0}, std::pair{"fixed_window_16", 500.0}, std::pair{"random_window", 800.0}})
    timing["regimes"].push_back({{"regime", g}, {"pair_ratio", 1.0}, {"train_ms", stats(ms)}, {"eval_ms", stats(1)},
                                 {"train_ratio", stats(ms / 1000)}, {"eval_ratio", stats(1)}});
  write_file_atomic(dir + "/timing.json", timing.dump());
  report_write(dir);
  const json rep2 = json::parse(read_file(dir + "/report.json"));
  const json& x2 = rep2["time_to_loss"][1];
  EXPECT_EQ(x2["regime"], "fixed_window_16");
  EXPECT_NEAR(x2["time_to_full_loss_s"]["mean"].get<double>(), (8.75 + 16) / 2, 1e-12);
  EXPECT_NEAR(x2["ratio_to_full"]["mean"].get<double>(), (0.21875 + 0.4) / 2, 1e-12);
  EXPECT_NEAR(x2["train_seconds"]["mean"].get<double>(), 20, 1e-12);  // 40 steps x 0.5 s, both seeds
  EXPECT_NEAR(rep2["time_to_loss"][0]["train_seconds"]["mean"].get<double>(), 40, 1e-12);
  EXPECT_NE(read_file(dir + "/report.md").find("Training seconds are interleaved time"), std::string::npos);
}

// The far-copy section on a hand-made suite: two buckets, full and fixed_window_16 on seeds 0 and 1. Excess of a run
// = copies' loss - control's loss; paired with full: seed 0 (3.0 - 2.0) - (2.5 - 2.0) = 0.5, seed 1 (3.2 - 2.1) -
// (2.4 - 2.0) = 0.7 at distance 32+ (mean 0.6, se 0.1, 95% half-width 12.706 x 0.1); 0.0 and 0.0 below 32.
TEST(Report, FarCopyExcessPairedBySeedHandWorked) {
  const test::TempDir tmp("farcopy");
  const std::string dir = tmp.path + "/suite";
  auto far = [](double near_loss, double near_ctrl, double far_loss, double far_ctrl) {
    return json{{"far_copy",
                 {{"ngram", 3},
                  {"novel", 10},
                  {"buckets",
                   {{{"lo", 0}, {"hi", 32}, {"n", 5}, {"loss", near_loss}, {"matched", 5}, {"control_loss", near_ctrl}},
                    {{"lo", 32}, {"hi", nullptr}, {"n", 5}, {"loss", far_loss}, {"matched", 5},
                     {"control_loss", far_ctrl}}}}}}};
  };
  const std::vector<json> lines = {metrics_line(20, 2000, 100, 20, 5.0), metrics_line(40, 4000, 100, 40, 4.0)};
  write_hand_run(dir, "full", 0, lines, far(1.0, 2.0, 2.5, 2.0));
  write_hand_run(dir, "full", 1, lines, far(1.1, 2.0, 2.4, 2.0));
  write_hand_run(dir, "fixed_window_16", 0, lines, far(1.2, 2.2, 3.0, 2.0));
  write_hand_run(dir, "fixed_window_16", 1, lines, far(1.3, 2.2, 3.2, 2.1));
  report_write(dir);
  const json rep = json::parse(read_file(dir + "/report.json"));
  ASSERT_EQ(rep["far_copy"].size(), 2u);
  const json& x = rep["far_copy"][1];
  EXPECT_EQ(x["regime"], "fixed_window_16");
  const json& farb = x["buckets"][1]["excess_vs_full"];
  EXPECT_NEAR(farb["mean"].get<double>(), 0.6, 1e-12);
  EXPECT_NEAR(farb["hi95"].get<double>() - 0.6, 12.706 * 0.1, 1e-9);
  EXPECT_NEAR(x["buckets"][1]["delta_loss_vs_full"]["mean"].get<double>(), 0.65, 1e-12);
  EXPECT_NEAR(x["buckets"][0]["excess_vs_full"]["mean"].get<double>(), 0.0, 1e-12);
  EXPECT_NEAR(x["buckets"][0]["loss"]["mean"].get<double>(), 1.25, 1e-12);
  const std::string md = read_file(dir + "/report.md");
  EXPECT_NE(md.find("## Far copies by distance (real text)"), std::string::npos);
  // Two seeds: the 95% interval [-0.67, 1.87] holds 0; the 90% one is 0.6 -+ 6.314 x 0.1, so the data rule out
  // only differences above 0.6 + 0.631.
  EXPECT_NE(md.find("- **fixed_window_16** far copies (real text) vs full: no difference detected beyond the "
                    "frequency-matched control in any distance bucket (equivalent within ±" +
                    fixed(0.6 + t_quantile_95(1) * 0.1, 3) + " nats in every bucket)."),
            std::string::npos)
      << md;
  EXPECT_NE(read_file(dir + "/summary.csv").find("fixed_window_16,far_copy,excess_vs_full_32+,2,0.6"),
            std::string::npos);
  // A hostile far_copy names the file.
  write_hand_run(dir, "full", 2, lines, json{{"far_copy", {{"buckets", {{{"lo", 0}, {"loss", "x"}}}}}}});
  EXPECT_NE(test::error_of([&] { report_write(dir); }).find("full-s2/eval.json: a 'far_copy' bucket is not"),
            std::string::npos);
}

TEST(Suite, SmokePresetEndToEndEveryReportNumberFromTheRunFiles) {
  ASSERT_TRUE(fs::exists("/usr/bin/rsvg-convert") && fs::exists("/usr/bin/xmllint"))
      << "rsvg-convert and xmllint check the figures: run scripts/setup.sh (librsvg2-bin, libxml2-utils)";
  const test::TempDir tmp("smoke");
  const std::string dir = tmp.path + "/suite";
  const Child c = run_aah({"suite", "--preset", "smoke", "--out", dir});
  ASSERT_EQ(c.rc, 0) << c.err;
  const SuitePreset p = suite_preset("smoke");
  const auto csv = read_runs_csv(dir + "/runs.csv");
  ASSERT_EQ(csv.size(), p.regimes.size());
  const std::string md = read_file(dir + "/report.md");
  const json timing = json::parse(read_file(dir + "/timing.json"));
  for (const auto& regime : p.regimes) {
    const std::string run = regime + "-s0";
    const std::string rd = dir + "/runs/" + run;
    // Re-derive every table number from the run's own files (definitions in the report's notes).
    const auto lines = metrics_lines(rd + "/metrics.jsonl");
    ASSERT_FALSE(lines.empty());
    const json& last = lines.back();
    std::vector<double> tps;
    double work = 0, peak = 0;
    for (const auto& j : lines) {
      tps.push_back(j["tokens_per_s"].get<double>());
      work += j["attn_work_ratio"].get<double>();
      peak = std::max(peak, j["peak_rss_mb"].get<double>());
    }
    tps.erase(tps.begin());
    std::sort(tps.begin(), tps.end());
    const double median = tps.size() % 2 ? tps[tps.size() / 2] : 0.5 * (tps[tps.size() / 2 - 1] + tps[tps.size() / 2]);
    const json ev = json::parse(read_file(rd + "/eval.json"));
    const auto& row = csv.at(run);
    const std::pair<const char*, double> expect[] = {
        {"train_val_loss", last["val_loss"].get<double>()},   {"train_acr", last["attn_ratio"].get<double>()},
        {"train_pair_ratio", last["pair_ratio"].get<double>()}, {"train_work_ratio", work / double(lines.size())},
        {"train_tokens_per_s", median},                       {"train_peak_mb", peak},
        {"eval_val_loss", ev["val_loss"].get<double>()},      {"eval_val_ppl", ev["val_ppl"].get<double>()},
        {"eval_inference_acr", ev["inference_acr"].get<double>()}, {"eval_pair_ratio", ev["pair_ratio"].get<double>()},
        {"eval_attn_work_ratio", ev["attn_work_ratio"].get<double>()},
        {"eval_tokens_per_s", ev["tokens_per_s"].get<double>()},  {"eval_peak_rss_mb", ev["peak_rss_mb"].get<double>()}};
    for (auto [col, v] : expect) EXPECT_NEAR(row.at(col), v, 1e-9 * std::max(1.0, std::fabs(v))) << run << " " << col;
    // Training seconds in interleaved time (the suite wrote timing.json for every regime): the last step x the
    // regime's median step time there / (1 - mean measuring share); full reaches its own final loss in its own time.
    // The logged time (the log intervals' tokens / tokens/s) leaves out evaluation as well.
    double logged = 0, prev_tokens = 0, share = 0;
    int shares = 0;
    for (const auto& j : lines) {
      logged += (j["tokens"].get<double>() - prev_tokens) / j["tokens_per_s"].get<double>();
      prev_tokens = j["tokens"].get<double>();
      if (j.contains("coverage_time_share")) share += j["coverage_time_share"].get<double>(), shares++;
    }
    double step_ms = NAN;
    for (const auto& t : timing["regimes"])
      if (t["regime"] == regime) step_ms = t["train_ms"]["median"].get<double>();
    const double secs = last["step"].get<double>() * step_ms / 1000 / (1 - (shares ? share / shares : 0.0));
    EXPECT_NEAR(row.at("train_time_s"), secs, 1e-9 * secs) << run;
    EXPECT_LT(logged, last["elapsed_s"].get<double>()) << run << ": elapsed_s includes the evaluations";
    if (regime == "full") {
      EXPECT_EQ(row.at("time_to_full_loss_ratio"), 1.0);
    }
    // The markdown tables show the same numbers, rounded, on the regime's rows.
    const size_t tables = md.find("## Training (the paper's Table 4)");
    ASSERT_NE(tables, std::string::npos);
    const size_t train_row = md.find("\n| " + regime + " | ", tables), eval_row = md.find("\n| " + regime + " | 1 |", tables);
    ASSERT_NE(train_row, std::string::npos) << regime;
    ASSERT_NE(eval_row, std::string::npos) << regime;
    const std::string tr = md.substr(train_row, md.find('\n', train_row + 1) - train_row);
    const std::string er = md.substr(eval_row, md.find('\n', eval_row + 1) - eval_row);
    EXPECT_NE(tr.find("| " + fixed(last["val_loss"].get<double>(), 4) + " | " + fixed(last["attn_ratio"].get<double>(), 4) + " |"),
              std::string::npos) << tr;
    EXPECT_NE(er.find("| " + fixed(ev["val_loss"].get<double>(), 4) + " | " + fixed(ev["val_ppl"].get<double>(), 3) + " | " +
                      fixed(ev["inference_acr"].get<double>(), 4) + " |"),
              std::string::npos) << er;
    // Inference ACR is the window-bucket formula of spec section 8: sum_W f_W * W / T.
    double acr = 0, total = 0;
    for (auto& [w, f] : ev["window_fractions"].items()) {
      acr += f.get<double>() * std::stod(w) / ev["context"].get<double>();
      total += f.get<double>();
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
    EXPECT_NEAR(ev["inference_acr"].get<double>(), acr, 1e-12) << run;
    EXPECT_GE(ev["attn_work_ratio"].get<double>(), ev["pair_ratio"].get<double>() - 1e-12) << run;
    if (regime == "full") {
      EXPECT_EQ(ev["inference_acr"].get<double>(), 1.0);
      EXPECT_EQ(ev["attn_work_ratio"].get<double>(), 1.0);
      EXPECT_EQ(row.at("train_work_ratio"), 1.0);
    }
    EXPECT_TRUE(fs::exists(dir + "/figures/window_map_" + regime + ".svg")) << regime;
  }
  // Every figure is well-formed and renders; the HTML is well-formed and carries every figure inline.
  int figures = 0;
  for (const auto& e : fs::directory_iterator(dir + "/figures")) {
    figures++;
    EXPECT_TRUE(well_formed_xml(e.path().string()));
    EXPECT_TRUE(renders(e.path().string(), dir + "/render.png"));
  }
  // 6 (val_loss_time.svg among them) + one window map per regime + the two headline figures + loss by position and
  // its Δ vs full.
  EXPECT_EQ(figures, 6 + int(p.regimes.size()) + 2 + 2);
  // Loss by position: the report's mean per bucket (one seed) is the run's own eval.json value.
  const std::string pos = read_file(dir + "/loss_by_position.csv");
  const json ev_full = json::parse(read_file(dir + "/runs/full-s0/eval.json"));
  const json& lp = ev_full["loss_by_position"];
  ASSERT_GE(lp["start"].size(), 2u);
  EXPECT_NE(pos.find(str_cat("\nfull,", lp["start"][1].get<int>(), ",1,", full_precision_text(lp["loss"][1].get<double>()), ",")),
            std::string::npos) << pos;
  // Heads that matter: the suite probed the full run (synth data); the report's heads are that probe's numbers, each
  // beside every regime's final window of the same head in its run of the same seed (its eval.json window_map).
  const json probe = json::parse(read_file(dir + "/runs/full-s0/probe.json"));
  const json rep = json::parse(read_file(dir + "/report.json"));
  ASSERT_EQ(rep["heads"].size(), probe["heads"].size());
  for (const json& h : rep["heads"]) {
    const int l = h["layer"].get<int>(), hh = h["head"].get<int>();
    const json& ph = probe["heads"][size_t(l) * probe["heads"].size() / 2 + size_t(hh)];  // smoke: 2 layers
    ASSERT_EQ(ph["layer"], l);
    ASSERT_EQ(ph["head"], hh);
    EXPECT_EQ(h["def_mass"].get<double>(), ph["def_mass"].get<double>());
    EXPECT_EQ(h["accuracy_drop"].get<double>(), ph["accuracy_drop"].get<double>());
    EXPECT_EQ(h["matters"].get<bool>(), ph["accuracy_drop"].get<double>() >= 0.10);
    for (const auto& regime : p.regimes) {
      if (regime == "full") continue;
      const json ev_r = json::parse(read_file(dir + "/runs/" + regime + "-s0/eval.json"));
      EXPECT_EQ(h["windows"][regime], ev_r["window_map"][size_t(l)][size_t(hh)]);
    }
  }
  for (size_t i = 1; i < rep["heads"].size(); i++)  // sorted by the drop
    EXPECT_GE(rep["heads"][i - 1]["accuracy_drop"].get<double>(), rep["heads"][i]["accuracy_drop"].get<double>());
  EXPECT_NE(md.find("## Heads that matter, and the windows they got"), std::string::npos);
  // The pretrained start: every run began from the weights of its seed's base run, and the report says so.
  ASSERT_TRUE(fs::exists(dir + "/base/full-s0/eval.json"));
  EXPECT_EQ(json::parse(read_file(dir + "/base/full-s0/config.json"))["train"]["steps"], 40);
  for (const auto& regime : p.regimes)
    EXPECT_EQ(json::parse(read_file(dir + "/runs/" + regime + "-s0/config.json"))["train"]["init_from"],
              dir + "/base/full-s0") << regime;
  EXPECT_NE(md.find("fine-tuned from its seed's full-attention base (`base/full-s<seed>`, 40 steps"),
            std::string::npos);
  EXPECT_TRUE(well_formed_xml(dir + "/report.html"));
  const std::string html = read_file(dir + "/report.html");
  size_t inline_svgs = 0;
  for (size_t at = 0; (at = html.find("<svg ", at)) != std::string::npos; at++) inline_svgs++;
  EXPECT_EQ(inline_svgs, size_t(figures));
  std::set<std::string> ids;  // one HTML document: every id once (each figure clips to its own plot area)
  for (size_t at = 0; (at = html.find(" id=\"", at)) != std::string::npos; at++) {
    const size_t from = at + 5, to = html.find('"', from);
    EXPECT_TRUE(ids.insert(html.substr(from, to - from)).second) << "repeated id " << html.substr(from, to - from);
  }
  EXPECT_GE(ids.size(), 2u);
  // `aah report` rebuilds the same report from the run directories alone.
  const std::string before = read_file(dir + "/runs.csv");
  fs::remove(dir + "/runs.csv");
  fs::remove(dir + "/report.md");
  const Child r = run_aah({"report", dir});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_file(dir + "/runs.csv"), before);
  EXPECT_EQ(read_file(dir + "/report.md"), md);
  // A rerun finds everything finished and touches no run.
  const auto mtime = fs::last_write_time(dir + "/runs/full-s0/model.safetensors");
  const Child again = run_aah({"suite", "--preset", "smoke", "--out", dir});
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.err.find("finished earlier: skipped"), std::string::npos) << again.err;
  EXPECT_EQ(fs::last_write_time(dir + "/runs/full-s0/model.safetensors"), mtime);
  // `aah eval --vs-full`: a regime decided at evaluation on the full-attention run, against its own full windows.
  const Child ev = run_aah({"eval", "--run", dir + "/runs/full-s0", "--data", dir + "/data", "--json", "--set",
                            "aah.regime=full_adaptive", "--vs-full"});
  ASSERT_EQ(ev.rc, 0) << ev.err;
  const json e = json::parse(ev.out);
  const json full_eval = json::parse(read_file(dir + "/runs/full-s0/eval.json"));
  EXPECT_TRUE(e["windows_decided_at_eval"].get<bool>());
  EXPECT_EQ(e["full_val_loss"].get<double>(), full_eval["val_loss"].get<double>());
  EXPECT_DOUBLE_EQ(e["delta_val_loss_vs_full"].get<double>(),
                   e["val_loss"].get<double>() - full_eval["val_loss"].get<double>());
  EXPECT_LT(e["inference_acr"].get<double>(), 1.0);
  // Different settings in the same directory are refused (finished runs would be mixed with other configs).
  const Child other = run_aah({"suite", "--preset", "smoke", "--out", dir, "--set", "train.lr=1e-3"});
  EXPECT_NE(other.rc, 0);
  EXPECT_NE(other.err.find("suite.json"), std::string::npos) << other.err;
}

TEST(Suite, TwoSeedsGiveIntervalsAndPairedDifferences) {
  const test::TempDir tmp("seeds");
  const std::string dir = tmp.path + "/suite";
  const Child c = run_aah({"suite", "--preset", "smoke", "--out", dir, "--seeds", "0,1", "--regimes",
                           "full,grouping_off", "--set", "train.steps=20", "--set", "train.eval_interval=10"});
  ASSERT_EQ(c.rc, 0) << c.err;
  auto loss = [&](const std::string& run) { return json::parse(read_file(dir + "/runs/" + run + "/eval.json"))["val_loss"].get<double>(); };
  const double f0 = loss("full-s0"), f1 = loss("full-s1"), g0 = loss("grouping_off-s0"), g1 = loss("grouping_off-s1");
  EXPECT_NE(f0, f1) << "seeds must differ";
  // Two values: mean, s = |a - b| / sqrt(2), half-width t(1) * s / sqrt(2) = 12.706 * |a - b| / 2.
  const json report = json::parse(read_file(dir + "/report.json"));
  ASSERT_EQ(report["regimes"].size(), 2u);
  const json& g = report["regimes"][1];
  ASSERT_EQ(g["regime"], "grouping_off");
  const json& cell = g["eval"]["val_loss"];
  EXPECT_EQ(cell["n"].get<int>(), 2);
  EXPECT_NEAR(cell["mean"].get<double>(), (g0 + g1) / 2, 1e-12);
  EXPECT_NEAR(cell["hi95"].get<double>() - cell["mean"].get<double>(), 12.706 * std::fabs(g0 - g1) / 2, 1e-9);
  const json& d = g["paired_vs_full"]["eval_val_loss"];
  const double d0 = g0 - f0, d1 = g1 - f1;
  EXPECT_EQ(d["n"].get<int>(), 2);
  EXPECT_NEAR(d["mean"].get<double>(), (d0 + d1) / 2, 1e-12);
  EXPECT_NEAR(d["hi95"].get<double>() - d["mean"].get<double>(), 12.706 * std::fabs(d0 - d1) / 2, 1e-9);
  // The markdown cell reads mean ± half-width.
  const std::string md = read_file(dir + "/report.md");
  EXPECT_NE(md.find(fixed((g0 + g1) / 2, 4) + " ± " + fixed(12.706 * std::fabs(g0 - g1) / 2, 4)), std::string::npos) << md;

  // The headline point and the summary sentence say the same paired difference, with the verdict its interval allows.
  ASSERT_EQ(report["headline"].size(), 2u);
  const json& h = report["headline"][1];
  EXPECT_EQ(h["regime"], "grouping_off");
  EXPECT_NEAR(h["delta_val_loss"]["mean"].get<double>(), (d0 + d1) / 2, 1e-12);
  EXPECT_NEAR(h["delta_val_loss"]["lo95"].get<double>(), (d0 + d1) / 2 - 12.706 * std::fabs(d0 - d1) / 2, 1e-9);
  const double lo = (d0 + d1) / 2 - 12.706 * std::fabs(d0 - d1) / 2, hi = (d0 + d1) / 2 + 12.706 * std::fabs(d0 - d1) / 2;
  const std::string verdict = lo > 0 ? "higher by " : hi < 0 ? "lower by " : "no difference detected (";
  EXPECT_NE(md.find("- **grouping_off**: validation loss: " + verdict), std::string::npos) << md;
  // The work ratio of the headline is the training table's: the mean over seeds of each run's mean work ratio.
  double work = 0;
  for (const char* run : {"grouping_off-s0", "grouping_off-s1"}) {
    const auto lines = metrics_lines(dir + "/runs/" + run + "/metrics.jsonl");
    double w = 0;
    for (const auto& j : lines) w += j["attn_work_ratio"].get<double>();
    work += w / double(lines.size()) / 2;
  }
  EXPECT_NEAR(h["work_ratio"].get<double>(), work, 1e-12);
  // timing.json (aah bench maps): both regimes, the lowest seed's map, and the ratio the summary quotes.
  const json timing = json::parse(read_file(dir + "/timing.json"));
  ASSERT_EQ(timing["regimes"].size(), 2u);
  EXPECT_EQ(timing["regimes"][1]["run"], "grouping_off-s0");
  EXPECT_EQ(h["step_time_ratio"].get<double>(), timing["regimes"][1]["train_ratio"]["median"].get<double>());
  const json ev0 = json::parse(read_file(dir + "/runs/grouping_off-s0/eval.json"));
  EXPECT_NEAR(timing["regimes"][1]["pair_ratio"].get<double>(), ev0["pair_ratio"].get<double>(), 1e-12);
  EXPECT_TRUE(fs::exists(dir + "/figures/tradeoff_time.svg"));
  EXPECT_TRUE(fs::exists(dir + "/figures/tradeoff_work.svg"));
}

TEST(Suite, FixedWindowPairRatioAndMatching) {
  // T = 8: full causal pairs 1 + 2 + ... + 8 = 36; w = 2: 1 + 2 * 7 = 15; w = 3: 1 + 2 + 3 * 6 = 21.
  EXPECT_DOUBLE_EQ(fixed_window_pair_ratio(8, 2), 15.0 / 36);
  EXPECT_DOUBLE_EQ(fixed_window_pair_ratio(8, 3), 21.0 / 36);
  EXPECT_DOUBLE_EQ(fixed_window_pair_ratio(8, 8), 1.0);
  EXPECT_EQ(fixed_window_matching(8, 0.45), 2);  // |15/36 - 0.45| = 0.033 < |21/36 - 0.45| = 0.133
  EXPECT_EQ(fixed_window_matching(8, 0.55), 3);
  EXPECT_EQ(fixed_window_matching(8, 1.0), 8);
  EXPECT_EQ(fixed_window_matching(8, 0.0), 1);
  // T = 2048, target 0.7: w(2T - w + 1) / (T(T + 1)) = 0.7 -> w^2 - 4097 w + 0.7 * 2048 * 2049 = 0 -> w = 926.5...
  const int w = fixed_window_matching(2048, 0.7);
  EXPECT_TRUE(w == 926 || w == 927) << w;
  EXPECT_LE(std::fabs(fixed_window_pair_ratio(2048, w) - 0.7), std::fabs(fixed_window_pair_ratio(2048, w == 926 ? 927 : 926) - 0.7));
}

TEST(Suite, CoverageBudgetRegimeSetsThePairBudgetInThousandths) {
  Config cfg;
  config_set(cfg, "aah.regime=coverage_budget_526");
  const ControllerConfig cc = controller_config_of(cfg);
  EXPECT_EQ(cc.policy, WindowPolicy::coverage);
  EXPECT_DOUBLE_EQ(cc.pair_budget, 0.526);
  Config too_big;
  config_set(too_big, "aah.regime=coverage_budget_1500");
  EXPECT_NE(test::error_of([&] { controller_config_of(too_big); }).find("aah.pair_budget"), std::string::npos);
}

TEST(Suite, EtaFromFinishedRuns) {
  SuiteEta e;
  e.runs_left = 4, e.tail_s = 60;
  EXPECT_TRUE(std::isnan(suite_eta_seconds(e)));  // nothing measured
  e.current_fraction = 0.25, e.current_seconds = 30;  // 120 s per run from the one in progress
  EXPECT_DOUBLE_EQ(suite_eta_seconds(e), 120 * 3.75 + 60);
  e.finished_runs = 2, e.finished_seconds = 200;  // then from finished runs (training and evaluation): 100 s
  EXPECT_DOUBLE_EQ(suite_eta_seconds(e), 100 * 3.75 + 60);
  e.runs_left = 0;
  EXPECT_DOUBLE_EQ(suite_eta_seconds(e), 60);
}

TEST(Suite, FixedMatchedResolvesToFullAdaptivesPairRatio) {
  const test::TempDir tmp("matched");
  const std::string dir = tmp.path + "/suite";
  const std::vector<std::string> args = {"suite", "--preset", "smoke", "--out", dir, "--seeds", "0,1", "--regimes",
                                         "full_adaptive,fixed_matched,coverage_matched", "--set", "train.steps=20",
                                         "--set", "train.eval_interval=10", "--timing-budget", "0"};
  const Child c = run_aah(args);
  ASSERT_EQ(c.rc, 0) << c.err;
  const json suite = json::parse(read_file(dir + "/suite.json"));
  const json& m = suite["matched"]["fixed_matched"];
  double target = 0;
  for (const char* run : {"full_adaptive-s0", "full_adaptive-s1"})
    target += json::parse(read_file(dir + "/runs/" + run + "/eval.json"))["pair_ratio"].get<double>() / 2;
  EXPECT_NEAR(m["target_pair_ratio"].get<double>(), target, 1e-12);
  const int w = fixed_window_matching(128, target);
  EXPECT_EQ(m["regime"], "fixed_window_" + std::to_string(w));
  for (const char* seed : {"0", "1"}) {
    const std::string rd = dir + "/runs/fixed_window_" + std::to_string(w) + "-s" + seed;
    ASSERT_TRUE(fs::exists(rd + "/eval.json")) << rd;
    const json ev = json::parse(read_file(rd + "/eval.json"));
    EXPECT_NEAR(ev["pair_ratio"].get<double>(), fixed_window_pair_ratio(128, w), 1e-12);
  }
  EXPECT_FALSE(fs::exists(dir + "/timing.json"));  // --timing-budget 0
  // A rerun keeps the recorded window and skips everything.
  const Child again = run_aah(args);
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_EQ(json::parse(read_file(dir + "/suite.json"))["matched"], suite["matched"]);
  EXPECT_NE(again.err.find("[4/6 fixed_window_" + std::to_string(w) + " s1] finished earlier: skipped"), std::string::npos)
      << again.err;
  // coverage_matched: the coverage policy under the pair budget of the same target, in thousandths.
  const json& cm = suite["matched"]["coverage_matched"];
  const int budget = int(std::lround(1000 * target));
  EXPECT_EQ(cm["regime"], "coverage_budget_" + std::to_string(budget));
  for (const char* seed : {"0", "1"}) {
    const std::string rd = dir + "/runs/coverage_budget_" + std::to_string(budget) + "-s" + seed;
    ASSERT_TRUE(fs::exists(rd + "/eval.json")) << rd;
    const json cfg = json::parse(read_file(rd + "/config.json"));
    EXPECT_DOUBLE_EQ(cfg["aah"]["pair_budget"].get<double>(), budget / 1000.0) << cfg.dump();
    EXPECT_EQ(cfg["aah"]["policy"], "coverage") << cfg.dump();
  }
  // fixed_matched without full_adaptive before it is refused before anything runs.
  const Child bad = run_aah({"suite", "--preset", "smoke", "--out", tmp.path + "/bad", "--regimes", "coverage_matched,full_adaptive"});
  EXPECT_NE(bad.rc, 0);
  EXPECT_NE(bad.err.find("needs full_adaptive before it"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(tmp.path + "/bad"));
}

// `aah bench maps` on a hand-made suite whose cost ratios are known: a model where attention is nearly all the work
// (width 16, 2 heads of 32, context 2048). The same full map under two regime names must time alike (ratio near 1);
// every head at T/8 must cost about its pair ratio (0.234), far below 1. Wide bounds: this tests the timer, not speed.
// A ratio the bench flags (spread over its limit: a busy machine) is not a result, so its bounds are not checked.
TEST(BenchMaps, SameMapTwiceIsOneAndAnEighthWindowFollowsItsPairs) {
  const test::TempDir tmp("maps");
  const std::string dir = tmp.path + "/suite";
  auto add_run = [&](const std::string& regime, int window) {
    Config cfg;
    config_set(cfg, "aah.regime=" + regime);
    for (const char* s : {"vocab_size=64", "hidden_size=16", "intermediate_size=32", "num_hidden_layers=1",
                          "num_attention_heads=2", "num_key_value_heads=2", "head_dim=32", "train.context=2048",
                          "train.batch_size=1"})
      config_set(cfg, s);
    const std::string rd = dir + "/runs/" + regime + "-s0";
    make_dirs(rd);
    write_file_atomic(rd + "/config.json", config_to_json(cfg).dump(2));
    const json ev = {{"val_loss", 1.0},       {"val_ppl", 2.7},  {"inference_acr", 1.0}, {"pair_ratio", 1.0},
                     {"attn_work_ratio", 1.0}, {"tokens_per_s", 1.0}, {"peak_rss_mb", 1.0},
                     {"window_fractions", json::object()}, {"window_map", {{window, window}}}};
    write_file_atomic(rd + "/eval.json", ev.dump());
  };
  add_run("full", 2048);
  add_run("grouping_off", 2048);
  add_run("fixed_window_256", 256);
  const Child c = run_aah({"bench", "maps", "--suite", dir, "--json", "--budget", "20", "--rounds-min", "7"});
  ASSERT_EQ(c.rc, 0) << c.err;
  const json t = json::parse(c.out);
  ASSERT_EQ(t["regimes"].size(), 3u);
  EXPECT_EQ(t["regimes"][0]["regime"], "full");
  // A figure the bench flags is not a result: its bounds are not checked.
  int checked = 0, flagged = 0;
  auto within = [&](const json& fig, double lo, double hi) {
    if (fig["flagged"].get<bool>()) {
      flagged++;
      return;
    }
    checked++;
    EXPECT_GT(fig["median"].get<double>(), lo) << c.out;
    EXPECT_LT(fig["median"].get<double>(), hi) << c.out;
  };
  for (const auto& r : t["regimes"]) {
    if (r["regime"] == "full") continue;
    if (r["regime"] == "grouping_off") {
      EXPECT_EQ(r["pair_ratio"].get<double>(), 1.0);
      within(r["train_ratio"], 0.8, 1.25);
      within(r["eval_ratio"], 0.8, 1.25);
    } else {
      const double pairs = fixed_window_pair_ratio(2048, 256);
      EXPECT_NEAR(r["pair_ratio"].get<double>(), pairs, 1e-12);
      within(r["train_ratio"], 0.0, 0.6);
      within(r["eval_ratio"], 0.5 * pairs, 0.6);
    }
  }
  if (checked == 0) GTEST_SKIP() << "every ratio flagged by the bench (a busy machine): no bound checked\n" << c.out;
  if (flagged > 0) std::cerr << flagged << " of 4 ratios flagged by the bench (a busy machine): their bounds not checked\n";
}

TEST(Suite, InterruptedSuiteResumesWithoutRedoingFinishedRuns) {
  const test::TempDir tmp("resume");
  const std::string dir = tmp.path + "/suite";
  const std::vector<std::string> args = {"suite", "--preset", "smoke", "--out", dir, "--regimes", "full,shallow_freeze",
                                         "--set", "train.steps=100", "--set", "train.checkpoint_interval=10",
                                         "--set", "train.eval_interval=0", "--no-report"};
  // Run the suite in the background; interrupt it (SIGINT, as Ctrl-C) once the second run has a checkpoint.
  Child first;
  std::thread t([&] { first = run_aah(args); });
  const std::string second = dir + "/runs/shallow_freeze-s0/training_state.safetensors";
  for (int i = 0; i < 30000 && !fs::exists(second); i++) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(fs::exists(second)) << "the second run never checkpointed";
  // Ctrl-C reaches every process of the terminal's group: here, the aah processes whose command line names dir.
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream f(e.path() / "cmdline", std::ios::binary);
    const std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmdline.find(dir) != std::string::npos && cmdline.find("aah") != std::string::npos) kill(std::stoi(pid), SIGINT);
  }
  t.join();
  ASSERT_NE(first.rc, 0) << "the suite finished before the interrupt arrived: " << first.err;
  EXPECT_TRUE(fs::exists(dir + "/runs/full-s0/eval.json"));
  EXPECT_FALSE(fs::exists(dir + "/runs/shallow_freeze-s0/eval.json"));
  const auto mtime = fs::last_write_time(dir + "/runs/full-s0/model.safetensors");
  const Child again = run_aah(args);
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.err.find("[1/2 full s0] finished earlier: skipped"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("[2/2 shallow_freeze s0] resuming at step"), std::string::npos) << again.err;
  EXPECT_EQ(fs::last_write_time(dir + "/runs/full-s0/model.safetensors"), mtime);
  EXPECT_TRUE(fs::exists(dir + "/runs/shallow_freeze-s0/eval.json"));
  const auto lines = metrics_lines(dir + "/runs/shallow_freeze-s0/metrics.jsonl");
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back()["step"].get<int>(), 100);
}

}  // namespace
}  // namespace aah

namespace aah {
namespace {

// A base that does not retrieve trains on: the smoke preset's 40-step base cannot retrieve, so with --base-extend 20
// --base-max 80 it trains on to 60, then to 80, and stops there; every regime starts from that base. A rerun skips it.
TEST(Suite, BaseThatDoesNotRetrieveTrainsOnUpToTheCap) {
  const test::TempDir tmp("base_ext");
  const std::string dir = tmp.path + "/suite";
  const Child c = run_aah({"suite", "--preset", "smoke", "--out", dir, "--regimes", "full", "--base-extend", "20",
                           "--base-max", "80", "--timing-budget", "0", "--no-report"});
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_NE(c.err.find("after 40 steps: training on to 60 (at most 80)"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("after 60 steps: training on to 80 (at most 80)"), std::string::npos) << c.err;
  EXPECT_EQ(c.err.find("training on to 100"), std::string::npos);
  const std::string metrics = read_file(dir + "/base/full-s0/metrics.jsonl");
  EXPECT_NE(metrics.find("\"step\":80"), std::string::npos);
  EXPECT_EQ(metrics.find("\"step\":85"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir + "/base/full-s0/eval.json"));
  EXPECT_EQ(run_config_load(dir + "/base/full-s0").train.steps, 80);
  const Child again = run_aah({"suite", "--preset", "smoke", "--out", dir, "--regimes", "full", "--base-extend", "20",
                               "--base-max", "80", "--timing-budget", "0", "--no-report"});
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.err.find("[base 1/1 s0] finished earlier: skipped"), std::string::npos) << again.err;
}

// A base that still does not retrieve at --base-max starts again from a new initialization (train.seed = seed + 1000),
// keeping the failed attempt evaluated beside it; the runs start from the new base, the report names the restart, and
// a rerun skips it.
TEST(Suite, BaseThatNeverRetrievesStartsAgainFromANewInitialization) {
  const test::TempDir tmp("base_restart");
  const std::string dir = tmp.path + "/suite";
  const std::vector<std::string> args = {"suite", "--preset", "smoke", "--out", dir, "--regimes", "full", "--base-extend",
                                         "20", "--base-max", "60", "--base-restarts", "1", "--timing-budget", "0"};
  const Child c = run_aah(args);
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_NE(c.err.find("after 60 steps: kept as " + dir + "/base/full-s0-failed1; starting again from a new "
                       "initialization (train.seed 1000, restart 1 of at most 1)"),
            std::string::npos)
      << c.err;
  EXPECT_NE(c.err.find("still does not retrieve at the farthest distance after 2 start(s)"), std::string::npos);
  const Config failed = run_config_load(dir + "/base/full-s0-failed1"), base = run_config_load(dir + "/base/full-s0");
  EXPECT_EQ(failed.train.seed, 0);
  EXPECT_EQ(failed.train.steps, 60);
  EXPECT_EQ(base.train.seed, 1000);
  EXPECT_EQ(base.train.steps, 60);
  EXPECT_TRUE(fs::exists(dir + "/base/full-s0-failed1/eval.json"));
  EXPECT_TRUE(fs::exists(dir + "/base/full-s0/eval.json"));
  // Another initialization: the first logged losses differ.
  std::vector<int> steps;
  const auto a = report_parse_metrics(read_file(dir + "/base/full-s0-failed1/metrics.jsonl"), "m", &steps);
  const auto b = report_parse_metrics(read_file(dir + "/base/full-s0/metrics.jsonl"), "m", &steps);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_NE(a.front()["loss"].get<double>(), b.front()["loss"].get<double>());
  const Config run = run_config_load(dir + "/runs/full-s0");
  EXPECT_EQ(run.train.init_from, dir + "/base/full-s0");
  EXPECT_EQ(run.train.seed, 0);
  EXPECT_NE(read_file(dir + "/report.md").find("seed 0 (train.seed 1000)"), std::string::npos);
  const Child again = run_aah(args);
  ASSERT_EQ(again.rc, 0) << again.err;
  EXPECT_NE(again.err.find("[base 1/1 s0] finished earlier: skipped"), std::string::npos) << again.err;
  EXPECT_FALSE(fs::exists(dir + "/base/full-s0-failed2"));
}

}  // namespace
}  // namespace aah

namespace aah {
namespace {

// A run that diverges is a result, marked: at learning rate 30 the smoke model's steps turn non-finite and are
// skipped; the suite finishes, and the report names the run, the first step and the count (summary, runs.csv,
// report.json), while a healthy run gets no such line.
TEST(Suite, ADivergedRunIsReportedAsDiverged) {
  const test::TempDir tmp("diverged");
  const std::string dir = tmp.path + "/suite";
  const Child c = run_aah({"suite", "--preset", "smoke", "--out", dir, "--regimes", "full", "--set", "train.lr=30",
                           "--timing-budget", "0"});
  ASSERT_EQ(c.rc, 0) << c.err;
  std::vector<int> steps;
  report_parse_metrics(read_file(dir + "/runs/full-s0/metrics.jsonl"), "m", &steps);
  ASSERT_GE(steps.size(), 10u) << "lr 30 no longer diverges: pick a larger one";
  const std::string md = read_file(dir + "/report.md");
  EXPECT_NE(md.find("- **full-s0** diverged at step " + std::to_string(steps[0]) + ": " +
                    std::to_string(steps.size()) + " of its 100 steps had a non-finite loss or gradient"),
            std::string::npos)
      << md;
  const json rep = json::parse(read_file(dir + "/report.json"));
  EXPECT_EQ(rep["runs"][0]["nonfinite_steps"].size(), steps.size());
  EXPECT_NE(read_file(dir + "/runs.csv").find("," + std::to_string(steps.size()) + ","), std::string::npos);
  const Child ok = run_aah({"suite", "--preset", "smoke", "--out", tmp.path + "/ok", "--regimes", "full",
                            "--timing-budget", "0"});
  ASSERT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(read_file(tmp.path + "/ok/report.md").find("non-finite"), std::string::npos);
}

}  // namespace
}  // namespace aah

namespace aah {
namespace {

// A result's name is what it trained: a --set that changes a knob the regime itself sets is refused before anything
// is written; repeated regimes and seeds run once.
TEST(Suite, SetsThatContradictARegimeAreRefusedAndRepeatsCollapse) {
  const test::TempDir tmp("names");
  const std::string dir = tmp.path + "/suite";
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--regimes", "full_adaptive", "--set", "aah.topology=freeze"}, "regime full_adaptive, which sets aah.topology"},
      {{"--regimes", "full", "--set", "aah.policy=coverage"}, "contradicts regime full, which sets aah.policy=\"off\""},
      {{"--regimes", "fixed_window_64", "--set", "aah.fixed_window=32"}, "which sets aah.fixed_window=64"},
      {{"--regimes", "grouping_off", "--set", "aah.grouping=true"}, "which sets aah.grouping=false"}};
  for (const auto& [args, msg] : refused) {
    std::vector<std::string> a = {"suite", "--preset", "smoke", "--out", dir};
    a.insert(a.end(), args.begin(), args.end());
    const Child c = run_aah(a);
    EXPECT_NE(c.rc, 0);
    EXPECT_NE(c.err.find(msg), std::string::npos) << c.err;
    EXPECT_FALSE(fs::exists(dir));
  }
  // A knob the regime does not set may be refined: fixed_window (policy fixed) with aah.fixed_window.
  EXPECT_EQ(controller_regime_keys("fixed_window"), std::vector<std::string>({"aah.shape", "aah.topology", "aah.policy"}));
  EXPECT_EQ(controller_regime_keys("copy_budget_500"), std::vector<std::string>({"aah.policy", "aah.pair_budget"}));
  const Child d = run_aah({"suite", "--preset", "smoke", "--out", dir, "--regimes", "full,full", "--seeds", "0,0",
                           "--timing-budget", "0", "--no-report"});
  ASSERT_EQ(d.rc, 0) << d.err;
  EXPECT_NE(d.err.find("--regimes lists full twice: it runs once"), std::string::npos) << d.err;
  EXPECT_NE(d.err.find("--seeds lists 0 twice: it runs once"), std::string::npos) << d.err;
  EXPECT_NE(d.err.find("1 runs (1 regimes x 1 seeds)"), std::string::npos) << d.err;
  // A rerun with other settings or other data is refused, naming what differs and how to start afresh.
  const Child e = run_aah({"suite", "--preset", "smoke", "--out", dir, "--regimes", "full", "--set", "train.steps=50"});
  EXPECT_NE(e.rc, 0);
  EXPECT_NE(e.err.find("records another suite: sets: the suite has nothing more, this command \"train.steps=50\""),
            std::string::npos)
      << e.err;
  EXPECT_NE(e.err.find("another --out to start afresh"), std::string::npos) << e.err;
  const Child f = run_aah({"suite", "--preset", "smoke", "--out", dir, "--regimes", "full", "--data", dir + "/data"});
  EXPECT_NE(f.rc, 0);
  EXPECT_NE(f.err.find("records another suite: data \"synth\", this command \"" + dir + "/data\""), std::string::npos)
      << f.err;
}

}  // namespace
}  // namespace aah

namespace aah {
namespace {

// Two suites on one directory at once cannot both proceed: while one holds OUT/.suite.lock the other is refused,
// before it reads or writes suite.json; once the lock is free (the holder exited or died), it runs.
TEST(Suite, ASecondSuiteOnTheSameDirectoryIsRefused) {
  const test::TempDir tmp("lock");
  const std::string dir = tmp.path + "/suite";
  fs::create_directories(dir);
  const int fd = ::open((dir + "/.suite.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::vector<std::string> args = {"suite", "--preset", "smoke", "--out", dir, "--regimes", "full",
                                         "--timing-budget", "0", "--no-report"};
  const Child busy = run_aah(args);
  EXPECT_NE(busy.rc, 0);
  EXPECT_NE(busy.err.find("another aah suite is running on this directory"), std::string::npos) << busy.err;
  EXPECT_FALSE(fs::exists(dir + "/suite.json"));
  ::close(fd);
  const Child free = run_aah(args);
  EXPECT_EQ(free.rc, 0) << free.err;

  // Only the suite's runs count: a copy under another name, and a run of a seed the suite does not list, are left
  // out of the report, each said so.
  fs::copy(dir + "/runs/full-s0", dir + "/runs/renamed-s0", fs::copy_options::recursive);
  fs::copy(dir + "/runs/full-s0", dir + "/runs/full-s7", fs::copy_options::recursive);
  json cfg7 = json::parse(read_file(dir + "/runs/full-s7/config.json"));
  cfg7["train"]["seed"] = 7;
  write_file_atomic(dir + "/runs/full-s7/config.json", cfg7.dump(2));
  const Child rep = run_aah({"report", dir});
  ASSERT_EQ(rep.rc, 0) << rep.err;
  EXPECT_NE(rep.err.find("runs/renamed-s0: left out (its config.json says regime full, seed 0)"), std::string::npos)
      << rep.err;
  EXPECT_NE(rep.err.find("runs/full-s7: left out (not a (regime, seed) of this suite's suite.json)"),
            std::string::npos)
      << rep.err;
  EXPECT_EQ(json::parse(read_file(dir + "/report.json"))["runs"].size(), 1u);
}

}  // namespace
}  // namespace aah
