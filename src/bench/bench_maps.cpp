#include "bench/bench_maps.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_train.h"
#include "core/check.h"
#include "core/sys.h"
#include "experiments/report.h"
#include "core/files.h"
#include "kernels/attention_common.h"
#include "model/model.h"
#include "model/weights.h"

namespace aah {

namespace {

using json = nlohmann::json;

// One regime's timed map: the run it comes from and its (L, H) windows.
struct TimedMap {
  std::string regime, run;
  int seed = 0;
  std::vector<int> windows;  // (L, H)
  double pair_ratio = 1;     // exact: executed causal pairs / full causal pairs
};

// The suite's finished runs (with eval.json), one map per regime: the lowest seed's. full first.
std::vector<TimedMap> suite_maps(const std::string& dir, Config* shape) {
  const std::string runs_dir = dir + "/runs";
  if (!path_exists(runs_dir)) fail("[bench maps] ", runs_dir, ": no such directory (is ", dir, " a suite directory?)");
  std::map<std::string, TimedMap> by_regime;
  bool first = true;
  for (const auto& name : list_dir(runs_dir)) {
    const std::string rd = runs_dir + "/" + name;
    if (!path_exists(rd + "/eval.json")) continue;
    const Config cfg = run_config_load(rd);
    if (first) *shape = cfg, first = false;
    const ModelConfig &a = cfg.model, &b = shape->model;
    if (a.num_hidden_layers != b.num_hidden_layers || a.num_attention_heads != b.num_attention_heads ||
        a.hidden_size != b.hidden_size || a.head_dim != b.head_dim || a.vocab_size != b.vocab_size ||
        cfg.train.context != shape->train.context || cfg.train.batch_size != shape->train.batch_size)
      fail("[bench maps] ", rd, ": another model shape, context or batch than the suite's other runs");
    const json ev = read_json_file(rd + "/eval.json");
    report_check_eval(ev, rd + "/eval.json");
    const json& map = ev["window_map"];
    const int L = a.num_hidden_layers, H = a.num_attention_heads, T = cfg.train.context;
    if (int(map.size()) != L || int(map[0].size()) != H)
      fail("[bench maps] ", rd, "/eval.json: window_map is ", map.size(), " x ", map[0].size(), ", the model has ", L,
           " layers x ", H, " heads");
    TimedMap t;
    t.regime = cfg.aah.regime, t.run = name, t.seed = int(cfg.train.seed);
    double pairs = 0;
    for (const auto& row : map)
      for (const auto& w : row) {
        t.windows.push_back(std::min(w.get<int>(), T));
        pairs += double(attn_visible_pairs(T, t.windows.back()));
      }
    t.pair_ratio = pairs / (double(attn_visible_pairs(T, T)) * L * H);
    auto it = by_regime.find(t.regime);
    if (it == by_regime.end() || t.seed < it->second.seed) by_regime[t.regime] = t;
  }
  if (by_regime.empty()) fail("[bench maps] ", runs_dir, ": no finished run (none has eval.json)");
  std::vector<TimedMap> maps;
  if (by_regime.count("full")) maps.push_back(by_regime["full"]);
  for (auto& [g, t] : by_regime)
    if (g != "full") maps.push_back(t);
  return maps;
}

}  // namespace

int bench_maps(const BenchOptions& o, const std::string& dir) {
  Config cfg;
  std::vector<TimedMap> maps = suite_maps(dir, &cfg);
  const ModelConfig& m = cfg.model;
  const int B = cfg.train.batch_size, T = cfg.train.context;
  // The reference of every ratio: full windows, whether or not the suite has a full run.
  if (maps[0].regime != "full") {
    TimedMap f;
    f.regime = "full", f.run = "(full windows)";
    f.windows.assign(size_t(m.num_hidden_layers) * m.num_attention_heads, T);
    maps.insert(maps.begin(), f);
  }
  BenchTrainer bt(cfg);  // one model for every map: they differ only in the windows in force
  std::vector<MeasureCase> cases;
  const int R = int(maps.size());
  for (const TimedMap& t : maps)  // training steps: cases 0 .. R-1
    cases.push_back({"train " + t.regime, [&, w = &t.windows] {
                       bt.model.windows() = *w;
                       bt.step();
                     }});
  for (const TimedMap& t : maps)  // evaluation batches: cases R .. 2R-1
    cases.push_back({"eval " + t.regime, [&, w = &t.windows] {
                       bt.model.windows() = *w;
                       bt.forward();
                     }});
  MeasureOptions mo = o.measure;
  for (int i = 1; i < R; i++) mo.ratios.push_back({i, 0}), mo.ratios.push_back({R + i, R});
  const MeasureResult res = measure_interleaved(cases, mo);

  const bool ss = o.samples;
  json out = {{"cpu", cpu_description()},
              {"threads", num_threads()},
              {"model",
               {{"layers", m.num_hidden_layers},
                {"heads", m.num_attention_heads},
                {"head_dim", m.head_dim},
                {"hidden", m.hidden_size},
                {"vocab", m.vocab_size}}},
              {"batch", B},
              {"context", T},
              {"rounds", res.rounds},
              {"warmup_rounds", res.warmup_rounds},
              {"settled", res.settled},
              {"measure_seconds", res.seconds},
              {"spread_limit", res.spread_limit},
              {"regimes", json::array()}};
  bool any_flag = false;
  for (int i = 0; i < R; i++) {
    const SampleStats train_ms = scaled(res.cases[i], 1e3), eval_ms = scaled(res.cases[R + i], 1e3);
    json r = {{"regime", maps[i].regime},
              {"run", maps[i].run},
              {"pair_ratio", maps[i].pair_ratio},
              {"windows", maps[i].windows},
              {"train_ms", stats_json(train_ms, ss)},
              {"eval_ms", stats_json(eval_ms, ss)}};
    bool flagged = train_ms.flagged || eval_ms.flagged;
    if (i > 0) {
      const SampleStats tr = ratio_stats(res, i, 0), er = ratio_stats(res, R + i, R);
      r["train_ratio"] = stats_json(tr, ss);
      r["eval_ratio"] = stats_json(er, ss);
      flagged = flagged || tr.flagged || er.flagged;
    }
    r["flagged"] = flagged;
    any_flag = any_flag || flagged;
    out["regimes"].push_back(r);
  }
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("%s: each regime's final window map on one model (%d layers, %d heads x %d, width %d, vocab %d), "
              "batch %d x %d, %s, %d thread%s\n",
              dir.c_str(), m.num_hidden_layers, m.num_attention_heads, m.head_dim, m.hidden_size, m.vocab_size, B, T,
              out["cpu"].get<std::string>().c_str(), num_threads(), num_threads() == 1 ? "" : "s");
  std::printf("%d rounds after %d warm-up round%s, %.1f s%s; figures: median (min, spread = IQR / median)\n",
              res.rounds, res.warmup_rounds, res.warmup_rounds == 1 ? "" : "s", res.seconds,
              res.settled ? "" : " (spreads not all settled)");
  for (int i = 0; i < R; i++) {
    std::printf("  %-24s pair ratio %.4f  train step ms %s  eval batch ms %s\n", maps[i].regime.c_str(),
                maps[i].pair_ratio, stats_text(scaled(res.cases[i], 1e3), 1).c_str(),
                stats_text(scaled(res.cases[R + i], 1e3), 1).c_str());
    if (i > 0)
      std::printf("  %-24s step time ratio vs full %s, eval time ratio %s\n", "",
                  stats_text(ratio_stats(res, i, 0), 3).c_str(), stats_text(ratio_stats(res, R + i, R), 3).c_str());
  }
  if (any_flag) print_flag_note(res.spread_limit);
  return 0;
}

}  // namespace aah
