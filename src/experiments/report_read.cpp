#include "experiments/report_read.h"

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "core/files.h"
#include "experiments/report_stats.h"
#include "model/weights.h"

namespace aah {

namespace report {

double number(const json& j, const char* key, const std::string& file, int line) {
  if (!j.contains(key) || !j[key].is_number())
    fail("[report] ", file, line ? str_cat(" line ", line) : std::string(), ": '", key, "' is missing or not a number");
  return j[key].get<double>();
}

namespace {

RunData read_run(const std::string& dir, const std::string& name) {
  RunData r;
  r.name = name;
  r.cfg = run_config_load(dir);
  r.regime = r.cfg.aah.regime;
  r.seed = int(r.cfg.train.seed);
  r.cc = controller_config_of(r.cfg);
  const std::string mpath = dir + "/metrics.jsonl";
  r.lines = report_parse_metrics(read_file(mpath, size_t(1) << 28), mpath, &r.nonfinite_steps);
  const json& last = r.lines.back();
  std::vector<double> tps;
  double work = 0, peak = 0;
  for (const auto& j : r.lines) {
    tps.push_back(j["tokens_per_s"].get<double>());
    work += j["attn_work_ratio"].get<double>();
    peak = std::max(peak, j["peak_rss_mb"].get<double>());
  }
  r.train = {{"val_loss", number(last, "val_loss", mpath)},    {"acr", last["attn_ratio"].get<double>()},
             {"pair_ratio", last["pair_ratio"].get<double>()}, {"work_ratio", work / double(r.lines.size())},
             {"tokens_per_s", median_after_warmup(tps)},       {"peak_mb", peak},
             {"levels_used", last.value("levels_used", 0.0)},  {"steps", last["step"].get<double>()}};
  r.curve = report_loss_by_time(r.lines);  // its last point is the last line's (it has val_loss)
  const std::string epath = dir + "/eval.json";
  r.eval = read_json_file(epath);
  report_check_eval(r.eval, epath);
  if (const std::string ppath = dir + "/probe.json"; file_exists(ppath)) {
    r.probe = read_json_file(ppath);
    report_check_probe(r.probe, r.cfg.model.num_hidden_layers, r.cfg.model.num_attention_heads, ppath);
  }
  return r;
}

// The names of DIR/runs/*, sorted.
std::vector<std::string> run_names(const std::string& dir, const std::string& runs_dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(runs_dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    closedir(d);
  } else {
    fail("[report] ", runs_dir, ": no such directory (is ", dir, " a suite directory?)");
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Regimes in the suite's order (full first when present), then any others found; only those with a run.
std::vector<std::string> suite_regimes(const json& suite, const std::vector<RunData>& runs) {
  std::vector<std::string> regimes;
  if (suite.contains("regimes") && suite["regimes"].is_array())
    for (const auto& r : suite["regimes"])
      if (r.is_string()) {
        std::string g = r.get<std::string>();
        if (suite.contains("matched") && suite["matched"].is_object() && suite["matched"].contains(g) &&
            suite["matched"][g].is_object() && suite["matched"][g].contains("regime") &&
            suite["matched"][g]["regime"].is_string())
          g = suite["matched"][g]["regime"].get<std::string>();  // "fixed_matched" -> fixed_window_W
        regimes.push_back(g);
      }
  for (const auto& r : runs)
    if (std::find(regimes.begin(), regimes.end(), r.regime) == regimes.end()) regimes.push_back(r.regime);
  std::erase_if(regimes, [&](const std::string& g) {
    return std::none_of(runs.begin(), runs.end(), [&](const RunData& r) { return r.regime == g; });
  });
  if (auto it = std::find(regimes.begin(), regimes.end(), "full"); it != regimes.end())
    std::rotate(regimes.begin(), it, it + 1);
  return regimes;
}

}  // namespace

SuiteRuns read_suite(const std::string& dir) {
  SuiteRuns s;
  s.dir = dir;
  const std::string runs_dir = dir + "/runs";
  std::vector<RunData>& runs = s.runs;
  for (const auto& n : run_names(dir, runs_dir)) {
    const std::string rd = runs_dir + "/" + n;
    if (!file_exists(rd + "/eval.json")) {
      s.unfinished.push_back(n);
      continue;
    }
    runs.push_back(read_run(rd, n));
  }
  s.suite = file_exists(dir + "/suite.json") ? read_json_file(dir + "/suite.json") : json::object();
  const json& suite = s.suite;
  if (!suite.is_object()) fail("[report] ", dir, "/suite.json: not a JSON object");
  // Only the suite's own runs count: a directory whose name is not its config's <regime>-s<seed>, or (with
  // suite.json) whose regime or seed the suite does not list, is left out and said so.
  std::erase_if(runs, [&](const RunData& r) {
    std::string why;
    if (r.name != str_cat(r.regime, "-s", r.seed))
      why = str_cat("its config.json says regime ", r.regime, ", seed ", r.seed);
    else if (!report_suite_lists(suite, r.regime, r.seed))
      why = "not a (regime, seed) of this suite's suite.json";
    if (!why.empty())
      std::fprintf(stderr, "[report] %s/%s: left out (%s)\n", runs_dir.c_str(), r.name.c_str(), why.c_str());
    return !why.empty();
  });
  if (runs.empty()) fail("[report] ", runs_dir, ": no finished run of this suite (none has eval.json)");

  s.regimes = suite_regimes(suite, runs);
  s.have_full = std::find(s.regimes.begin(), s.regimes.end(), "full") != s.regimes.end();
  s.timing = read_timing(dir + "/timing.json");
  return s;
}

// DIR/timing.json (aah bench maps --json), checked: regimes with pair ratio, train/eval ms statistics and, but
// for full, their ratios to full. Returns null when the file is absent.
json read_timing(const std::string& path) {
  if (!path_exists(path)) return nullptr;
  const json t = read_json_file(path);
  auto stats_ok = [](const json& s) {
    return s.is_object() && s.contains("median") && s["median"].is_number() && s.contains("spread") &&
           s["spread"].is_number() && s.contains("flagged") && s["flagged"].is_boolean();
  };
  if (!t.is_object() || !t.contains("regimes") || !t["regimes"].is_array() || t["regimes"].empty())
    fail("[report] ", path, ": no 'regimes' array (rerun: aah bench maps --suite DIR --json > ", path, ")");
  for (const auto& r : t["regimes"]) {
    if (!r.is_object() || !r.contains("regime") || !r["regime"].is_string() || !r.contains("pair_ratio") ||
        !r["pair_ratio"].is_number() || !stats_ok(r.value("train_ms", json())) || !stats_ok(r.value("eval_ms", json())))
      fail("[report] ", path, ": a 'regimes' entry is not {regime, pair_ratio, train_ms, eval_ms, ...}");
    if (r["regime"] != "full" &&
        (!stats_ok(r.value("train_ratio", json())) || !stats_ok(r.value("eval_ratio", json()))))
      fail("[report] ", path, ": regime ", r["regime"].dump(), " has no train_ratio / eval_ratio statistics");
  }
  return t;
}

// The timing entry of `regime`, or null.
json timing_of(const json& timing, const std::string& regime) {
  if (timing.is_null()) return nullptr;
  for (const auto& r : timing["regimes"])
    if (r["regime"] == regime) return r;
  return nullptr;
}

}  // namespace report

using report::json;
using report::number;

std::vector<json> report_parse_metrics(const std::string& text, const std::string& name,
                                       std::vector<int>* nonfinite_steps) {
  std::vector<json> lines;
  size_t start = 0;
  int line_no = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    line_no++;
    if (line.empty()) continue;
    json j = parse_json(line, str_cat(name, " line ", line_no), "[report]", "not JSON:");
    if (!j.is_object()) fail("[report] ", name, " line ", line_no, ": not a JSON object");
    if (j.contains("event")) {  // non-finite steps, loss spikes
      if (nonfinite_steps && j["event"] == "nonfinite" && j.contains("step") && j["step"].is_number_integer())
        nonfinite_steps->push_back(j["step"].get<int>());
      continue;
    }
    for (const char* k : {"step", "attn_ratio", "pair_ratio", "attn_work_ratio", "tokens_per_s", "peak_rss_mb"})
      number(j, k, name, line_no);
    if (!j["step"].is_number_integer() || j["step"].get<int64_t>() < 0 || j["step"].get<int64_t>() > INT32_MAX)
      fail("[report] ", name, " line ", line_no, ": 'step' is not a step number");
    for (const char* k : {"val_loss", "levels_used"})
      if (j.contains(k)) number(j, k, name, line_no);
    lines.push_back(std::move(j));
  }
  if (lines.empty()) fail("[report] ", name, ": no metrics lines");
  if (!lines.back().contains("val_loss")) fail("[report] ", name, ": the last line has no val_loss (unfinished run?)");
  return lines;
}

std::vector<LossAtTime> report_loss_by_time(const std::vector<json>& lines) {
  // Training seconds at every line: from the throughput (training time only), else elapsed_s, else unknown.
  std::vector<double> sec(lines.size(), NAN);
  double t = 0, prev = 0;
  for (size_t i = 0; i < lines.size(); i++) {
    const json& j = lines[i];
    const double tokens = j.contains("tokens") && j["tokens"].is_number() ? j["tokens"].get<double>() : NAN;
    const double tps =
        j.contains("tokens_per_s") && j["tokens_per_s"].is_number() ? j["tokens_per_s"].get<double>() : NAN;
    if (!(tokens >= prev && tps > 0 && std::isfinite(tokens) && std::isfinite(tps))) {
      std::fill(sec.begin(), sec.end(), NAN);
      break;
    }
    t += (tokens - prev) / tps, prev = tokens;
    sec[i] = t;
  }
  if (!lines.empty() && !std::isfinite(sec.back())) {  // no usable throughput: elapsed_s, if it never goes back
    double last = 0;
    for (size_t i = 0; i < lines.size(); i++) {
      const json& j = lines[i];
      const double e = j.contains("elapsed_s") && j["elapsed_s"].is_number() ? j["elapsed_s"].get<double>() : NAN;
      if (!(e >= last && std::isfinite(e))) {
        std::fill(sec.begin(), sec.end(), NAN);
        break;
      }
      sec[i] = last = e;
    }
  }
  std::vector<LossAtTime> curve;
  for (size_t i = 0; i < lines.size(); i++)
    if (lines[i].contains("val_loss") && lines[i]["val_loss"].is_number() && lines[i].contains("step") &&
        lines[i]["step"].is_number_integer())
      curve.push_back({lines[i]["step"].get<int>(), sec[i], lines[i]["val_loss"].get<double>()});
  return curve;
}

bool report_suite_lists(const json& suite, const std::string& regime, int seed) {
  if (!suite.contains("regimes") || !suite.contains("seeds") || !suite["regimes"].is_array() ||
      !suite["seeds"].is_array())
    return true;  // no record of the suite's runs (a hand-made suite): every run counts
  bool seed_ok = false, regime_ok = false;
  for (const auto& s : suite["seeds"]) seed_ok = seed_ok || (s.is_number_integer() && s.get<int>() == seed);
  for (const auto& g : suite["regimes"]) {
    if (!g.is_string()) continue;
    std::string name = g.get<std::string>();
    const json& m = suite.value("matched", json::object());
    if (m.is_object() && m.contains(name) && m[name].is_object() && m[name].value("regime", json()).is_string())
      name = m[name]["regime"].get<std::string>();  // "fixed_matched" -> fixed_window_W
    regime_ok = regime_ok || name == regime;
  }
  return seed_ok && regime_ok;
}

void report_check_eval(const json& e, const std::string& name) {
  if (!e.is_object()) fail("[report] ", name, ": not a JSON object");
  for (const char* k :
       {"val_loss", "val_ppl", "inference_acr", "pair_ratio", "attn_work_ratio", "tokens_per_s", "peak_rss_mb"})
    number(e, k, name);
  if (!e.contains("window_fractions") || !e["window_fractions"].is_object())
    fail("[report] ", name, ": 'window_fractions' is missing or not an object");
  for (const auto& item : e["window_fractions"].items()) {
    const std::string& w = item.key();
    if (w.empty() || w.size() > 9 || w.find_first_not_of("0123456789") != std::string::npos ||
        !item.value().is_number())
      fail("[report] ", name, ": window_fractions entry '", w, "' is not window -> fraction");
  }
  if (e.contains("loss_by_position")) {
    const json& lp = e["loss_by_position"];
    if (!lp.is_object() || !lp.contains("start") || !lp.contains("loss") || !lp["start"].is_array() ||
        !lp["loss"].is_array() || lp["start"].size() != lp["loss"].size() || lp["start"].size() > 1'000'000)
      fail("[report] ", name, ": 'loss_by_position' is not {start: [...], loss: [...]} of equal lengths");
    for (size_t i = 0; i < lp["start"].size(); i++)
      if (!lp["start"][i].is_number_integer() || !(lp["loss"][i].is_number() || lp["loss"][i].is_null()))
        fail("[report] ", name, ": 'loss_by_position' entry ", i, " is not (integer start, loss)");
  }
  // Distance buckets: {lo (integer), and each of `numbers` a number or null, ...}.
  auto check_buckets = [&](const char* key, std::initializer_list<const char*> numbers, const char* shape) {
    if (!e.contains(key)) return;
    const json& x = e[key];
    if (!x.is_object() || !x.contains("buckets") || !x["buckets"].is_array() || x["buckets"].size() > 1000)
      fail("[report] ", name, ": '", key, "' has no 'buckets' array");
    for (const auto& b : x["buckets"]) {
      bool ok = b.is_object() && b.contains("lo") && b["lo"].is_number_integer();
      for (const char* n : numbers) ok = ok && b.contains(n) && (b[n].is_number() || b[n].is_null());
      if (!ok) fail("[report] ", name, ": a '", key, "' bucket is not ", shape);
    }
  };
  check_buckets("retrieval", {"accuracy"}, "{lo, hi, n, accuracy, loss}");
  check_buckets("far_copy", {"loss", "control_loss"}, "{lo, hi, n, loss, matched, control_loss}");
  if (!e.contains("window_map") || !e["window_map"].is_array() || e["window_map"].empty())
    fail("[report] ", name, ": 'window_map' is missing, empty or not an array");
  const json& map = e["window_map"];
  for (size_t l = 0; l < map.size(); l++) {
    if (!map[l].is_array() || map[l].size() != map[0].size() || map[l].empty())
      fail("[report] ", name, ": window_map row ", l, " is not an array as long as row 0");
    for (const auto& w : map[l])
      if (!w.is_number_integer() || w.get<int64_t>() < 1 || w.get<int64_t>() > INT32_MAX)
        fail("[report] ", name, ": window_map row ", l, " holds ", w.dump(), ", not a window");
  }
}

void report_check_probe(const json& p, int layers, int heads, const std::string& name) {
  if (!p.is_object() || !p.contains("heads") || !p["heads"].is_array())
    fail("[report] ", name, ": not a probe (an object with a 'heads' array; aah probe heads --json)");
  if (p["heads"].size() != size_t(layers) * size_t(heads))
    fail("[report] ", name, ": ", p["heads"].size(), " heads, but the run's model has ", layers, " x ", heads);
  for (const auto& h : p["heads"]) {
    const bool ok = h.is_object() && h.contains("layer") && h["layer"].is_number_integer() && h.contains("head") &&
                    h["head"].is_number_integer() && h.contains("def_mass") && h["def_mass"].is_number() &&
                    h.contains("accuracy_drop") && h["accuracy_drop"].is_number();
    if (!ok || h["layer"].get<int64_t>() < 0 || h["layer"].get<int64_t>() >= layers || h["head"].get<int64_t>() < 0 ||
        h["head"].get<int64_t>() >= heads)
      fail("[report] ", name, ": a head entry is not {layer, head, def_mass, accuracy_drop} of this model: ", h.dump());
  }
}

}  // namespace aah
