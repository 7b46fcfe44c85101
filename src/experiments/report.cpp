#include "experiments/report.h"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "eval/far_copy.h"
#include "eval/retrieval.h"
#include "experiments/stats.h"
#include "experiments/svg.h"
#include "core/files.h"
#include "model/config.h"
#include "model/weights.h"

namespace aah {

namespace {

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

// "- **run**: diverged ..." when a run had non-finite steps, else "". A run whose non-finite steps are at least a
// tenth of its steps diverged: its numbers are those of the weights before the first.
std::string nonfinite_note(const RunData& r) {
  if (r.nonfinite_steps.empty()) return "";
  const int n = int(r.nonfinite_steps.size()), steps = std::max(1, r.cfg.train.steps);
  const int first = *std::min_element(r.nonfinite_steps.begin(), r.nonfinite_steps.end());
  if (10 * n >= steps)
    return str_cat("- **", r.name, "** diverged at step ", first, ": ", n, " of its ", steps, " steps had a non-finite ",
                   "loss or gradient and were skipped (metrics.jsonl events), so its numbers are mostly those of the "
                   "weights before step ", first, ": not a result of its regime.\n");
  return str_cat("- **", r.name, "**: ", n, " step", n > 1 ? "s" : "", " of ", steps, " skipped as non-finite (first at ",
                 "step ", first, ").\n");
}

double number(const json& j, const char* key, const std::string& file, int line = 0) {
  if (!j.contains(key) || !j[key].is_number())
    fail("[report] ", file, line ? str_cat(" line ", line) : std::string(), ": '", key, "' is missing or not a number");
  return j[key].get<double>();
}

// Median of the training tokens/s after the first logged interval (warmup), or the first when there is one.
double median_after_warmup(std::vector<double> v) {
  if (v.size() > 1) v.erase(v.begin());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

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
  r.train = {{"val_loss", number(last, "val_loss", mpath)},
             {"acr", last["attn_ratio"].get<double>()},
             {"pair_ratio", last["pair_ratio"].get<double>()},
             {"work_ratio", work / double(r.lines.size())},
             {"tokens_per_s", median_after_warmup(tps)},
             {"peak_mb", peak},
             {"levels_used", last.value("levels_used", 0.0)},
             {"steps", last["step"].get<double>()}};
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

// The columns of the two tables: key, header, decimals, source (train or eval).
struct Column {
  const char* key;
  const char* header;
  int decimals;
  bool eval;
};
const Column kTrainColumns[] = {{"val_loss", "val loss", 4, false},    {"acr", "ACR", 4, false},
                                {"pair_ratio", "pair ratio", 4, false}, {"work_ratio", "attn work ratio", 4, false},
                                {"tokens_per_s", "tokens/s during training", 0, false}, {"peak_mb", "peak MB", 0, false}};
const Column kEvalColumns[] = {{"val_loss", "val loss", 4, true},        {"val_ppl", "perplexity", 3, true},
                               {"inference_acr", "inference ACR", 4, true}, {"pair_ratio", "pair ratio", 4, true},
                               {"attn_work_ratio", "attn work ratio", 4, true}, {"tokens_per_s", "tokens/s during eval", 0, true},
                               {"peak_rss_mb", "peak MB", 0, true}};

double value_of(const RunData& r, const Column& c) {
  return c.eval ? r.eval[c.key].get<double>() : r.train.at(c.key);
}

// Markdown text as HTML text: escaped, `code` spans as <code> (a lone backtick stays as it is).
std::string html_text(const std::string& md) {
  std::string o;
  for (size_t at = 0; at < md.size();) {
    const size_t open = md.find('`', at), close = open == std::string::npos ? open : md.find('`', open + 1);
    if (close == std::string::npos) {
      o += svg_escape(md.substr(at));
      break;
    }
    o += svg_escape(md.substr(at, open - at)) + "<code>" + svg_escape(md.substr(open + 1, close - open - 1)) + "</code>";
    at = close + 1;
  }
  return o;
}

// A paragraph of markdown text (a trailing newline dropped).
std::string html_paragraph(std::string md) {
  while (!md.empty() && md.back() == '\n') md.pop_back();
  return "<p>" + html_text(md) + "</p>\n";
}

// A markdown list ("* item\n" per line) as an HTML <ul>, bold markers dropped.
std::string html_list(const std::string& md) {
  std::string html = "<ul>\n";
  for (size_t at = 0; at < md.size();) {
    const size_t end = md.find('\n', at);
    std::string item = md.substr(at + 2, end - at - 2);
    std::erase(item, '*');
    html += "<li>" + html_text(item) + "</li>\n";
    at = end + 1;
  }
  return html + "</ul>\n";
}

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return "–";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

// "3.0312" for one seed, "3.0312 ± 0.0121" (95% half-width) for more.
std::string cell(const MeanInterval& m, int decimals) {
  if (m.n == 0) return "–";
  if (m.n < 2) return fixed(m.mean, decimals);
  return fixed(m.mean, decimals) + " ± " + fixed(m.hi - m.mean, decimals);
}

json interval_json(const MeanInterval& m) { return {{"n", m.n}, {"mean", m.mean}, {"lo95", m.lo}, {"hi95", m.hi}}; }
// The same, with null numbers when no value was finite (n = 0: e.g. a loss no seed reached).
json interval_json_or_null(const MeanInterval& m) {
  return m.n ? interval_json(m) : json{{"n", 0}, {"mean", nullptr}, {"lo95", nullptr}, {"hi95", nullptr}};
}
// A paired difference's interval json `j` with its 90% interval and the equivalence bound (null below two seeds).
json with_equivalence(json j, const MeanInterval& d) {
  const Interval i = interval90(d);
  const bool two = d.n >= 2;
  j["lo90"] = two ? json(i.lo) : json(nullptr);
  j["hi90"] = two ? json(i.hi) : json(nullptr);
  j["equiv_bound90"] = two ? json(equivalence_bound90(d)) : json(nullptr);
  return j;
}

std::string safe_name(const std::string& s) {
  std::string o;
  for (char c : s) o += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') ? c : '-';
  return o;
}

std::string shape_text(const std::vector<int>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); i++) o += (i ? "," : "") + std::to_string(s[i]);
  return o + "]";
}

// Table 4's descriptive columns.
std::vector<std::string> regime_columns(const RunData& r) {
  const ControllerConfig& c = r.cc;
  if (c.policy == WindowPolicy::off) return {"–", "–", "–"};
  if (c.policy != WindowPolicy::controller) return {str_cat("policy ", window_policy_name(c.policy)), "–", "–"};
  if (!c.grouping) return {"off", "–", c.joint_scorer ? "on" : "off"};
  return {str_cat("on (", topology_mode_name(c.topology), ")"), shape_text(c.shape), c.joint_scorer ? "on" : "off"};
}

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

// A column of numbers: some cell starts like one ("0.93", "-0.01", "+3"; others may read "not reached"), or none
// reads like text ("off", "[2,2]"): a column of "–" stays aligned with its neighbours.
bool numeric_column(const Table& t, size_t col) {
  bool text = false;
  for (const auto& row : t.rows) {
    if (col >= row.size() || row[col].empty()) continue;
    const std::string& c = row[col];
    if (std::isdigit(static_cast<unsigned char>(c[0])) || ((c[0] == '-' || c[0] == '+') && c.size() > 1)) return true;
    text |= std::isalpha(static_cast<unsigned char>(c[0])) || c[0] == '[';
  }
  return !text;
}

std::string markdown(const Table& t) {
  std::string o = "|";
  for (const auto& h : t.header) o += " " + h + " |";
  o += "\n|";
  for (size_t i = 0; i < t.header.size(); i++) o += i && numeric_column(t, i) ? "---:|" : "---|";
  o += "\n";
  for (const auto& row : t.rows) {
    o += "|";
    for (const auto& c : row) o += " " + c + " |";
    o += "\n";
  }
  return o;
}

// The report's <head>: a page that reads at a desktop width and on a narrow screen. Tables scroll sideways in their
// box when wider than the page; figures shrink to fit it and sit side by side where there is room (the small
// window maps), each caption as wide as its figure.
std::string html_head() {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n<title>aah suite report</title>\n"
         "<style>\n"
         "body{font-family:\"DejaVu Sans\",Arial,sans-serif;font-size:15px;line-height:1.45;max-width:1200px;"
         "margin:2em auto;padding:0 1em;color:#222}\n"
         "p,ul{max-width:58em}li{margin:0.2em 0}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:0.2em}\n"
         "code{font-size:0.92em;background:#f2f2f2;padding:0 0.2em;border-radius:3px}\n"
         "div.table{overflow-x:auto;margin:1em 0}table{border-collapse:collapse;font-size:0.93em}\n"
         "th,td{border:1px solid #ccc;padding:4px 7px}th{background:#f2f2f2;vertical-align:bottom}\n"
         "tr:nth-child(even) td{background:#fafafa}td.n{text-align:right;white-space:nowrap;"
         "font-variant-numeric:tabular-nums}td.flag{color:#888}\n"
         "figure{display:inline-table;vertical-align:top;margin:1em 1.5em 1.5em 0}"
         "figure svg{display:block;max-width:100%;height:auto}\n"
         "figcaption{display:table-caption;caption-side:bottom;color:#555;font-size:0.9em;padding-top:0.3em}\n"
         "</style>\n</head>\n<body>\n";
}

// The tables' columns of the logs' throughput ("during training", "during eval"): measured while the runs of a
// suite ran one after another on a machine that may have been busy, so their intervals are mostly noise
// (39,755 ± 23,041). report.json, runs.csv and summary.csv keep them; the side-by-side timing is the result.
const char* const kLoggedThroughput[] = {"tokens/s during training", "tokens/s during eval", "Δ inference tokens/s"};

// The table a reader sees: t without the logged-throughput columns.
Table shown(const Table& t) {
  std::vector<size_t> keep;
  for (size_t i = 0; i < t.header.size(); i++)
    if (std::find(std::begin(kLoggedThroughput), std::end(kLoggedThroughput), t.header[i]) == std::end(kLoggedThroughput))
      keep.push_back(i);
  Table o;
  for (size_t i : keep) o.header.push_back(t.header[i]);
  for (const auto& row : t.rows) {
    o.rows.emplace_back();
    for (size_t i : keep) o.rows.back().push_back(i < row.size() ? row[i] : std::string());
  }
  return o;
}

// A header cell's text, free to break after an underscore: "deterministic_window window" is no wider than its words.
std::string header_html(const std::string& h) {
  std::string o;
  for (char c : svg_escape(h)) o += c == '_' ? std::string("_<wbr/>") : std::string(1, c);
  return o;
}

// An HTML table in a box that scrolls sideways when the table is wider than the page; numbers right-aligned on one
// line, text columns left-aligned, a timing flagged " !" (stat_cell: not a result) greyed out.
std::string html_table(const Table& t) {
  std::string o = "<div class=\"table\"><table>\n<tr>";
  for (const auto& h : t.header) o += "<th>" + header_html(h) + "</th>";
  o += "</tr>\n";
  std::vector<bool> numeric;
  for (size_t i = 0; i < t.header.size(); i++) numeric.push_back(i > 0 && numeric_column(t, i));
  for (const auto& row : t.rows) {
    o += "<tr>";
    for (size_t i = 0; i < row.size(); i++) {
      std::string cls = i < numeric.size() && numeric[i] ? "n" : "";
      if (row[i].ends_with(" !")) cls += cls.empty() ? "flag" : " flag";
      o += (cls.empty() ? "<td>" : "<td class=\"" + cls + "\">") + svg_escape(row[i]) + "</td>";
    }
    o += "</tr>\n";
  }
  return o + "</table></div>\n";
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

std::string full_precision(double v) {
  if (!std::isfinite(v)) return "";
  char b[64];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
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
    if (r["regime"] != "full" && (!stats_ok(r.value("train_ratio", json())) || !stats_ok(r.value("eval_ratio", json()))))
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

// "0.912 (spread 2.1%)", "0.912 (spread 14.0%) !" when flagged.
std::string stat_cell(const json& s, int decimals) {
  return fixed(s["median"].get<double>(), decimals) + " (spread " + fixed(100 * s["spread"].get<double>(), 1) + "%)" +
         (s["flagged"].get<bool>() ? " !" : "");
}

// The matched baselines of suite.json ("fixed_matched" resolved), as a sentence for the setup line.
std::string matched_note(const json& suite) {
  if (!suite.contains("matched") || !suite["matched"].is_object()) return "";
  std::string o;
  for (const auto& [k, m] : suite["matched"].items())
    if (m.is_object() && m.contains("regime") && m["regime"].is_string() && m.contains("target_pair_ratio") &&
        m["target_pair_ratio"].is_number() && m.contains("pair_ratio") && m["pair_ratio"].is_number())
      o += str_cat(" ", m["regime"].get<std::string>(), " is the matched-cost baseline: every head one window, chosen so "
                   "that its pair ratio (", fixed(m["pair_ratio"].get<double>(), 4), ") is the closest to ",
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
    if (bc.train.seed != seed) restarted += str_cat(restarted.empty() ? "" : ", ", "seed ", seed, " (train.seed ", bc.train.seed, ")");
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
    o += str_cat(" Started again from a new initialization after the first did not retrieve (the failed ones kept in "
                 "`base/full-s<seed>-failed<k>`): ", restarted, ".");
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

// A paired difference in words: an interval that excludes 0 is a difference, else "no difference detected" with the
// equivalence bound the data support. One seed gives no interval, and no claim.
std::string verdict(const MeanInterval& d, int decimals, const char* unit) {
  if (d.n == 0) return "no seed paired with full: no claim";
  if (d.n < 2) return str_cat(fixed(d.mean, decimals), unit, " (one seed: no claim)");
  // The equivalence bound is said beside a difference too: how far from full the data let it be.
  const std::string ci = str_cat("95% CI [", fixed(d.lo, decimals), ", ", fixed(d.hi, decimals), "], equivalent within ±",
                                 fixed(equivalence_bound90(d), decimals), unit);
  if (d.lo > 0) return str_cat("higher by ", fixed(d.mean, decimals), unit, " (", ci, ")");
  if (d.hi < 0) return str_cat("lower by ", fixed(-d.mean, decimals), unit, " (", ci, ")");
  return str_cat("no difference detected (", d.mean >= 0 ? "+" : "", fixed(d.mean, decimals), unit, ", ", ci, ")");
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
         "one-sided tests at 5% exclude any larger difference. One seed gives no interval: it reads \"one seed: no claim\". ";
}

// The runs of regime g, in run order.
std::vector<const RunData*> regime_runs(const std::vector<RunData>& runs, const std::string& g) {
  std::vector<const RunData*> v;
  for (const auto& r : runs)
    if (r.regime == g) v.push_back(&r);
  return v;
}

// The run of `seed` among rs, or null.
const RunData* seed_run(const std::vector<const RunData*>& rs, int seed) {
  for (const RunData* r : rs)
    if (r->seed == seed) return r;
  return nullptr;
}

// A per-run number over the runs rs (mean, interval) and its paired difference from full's run of the same seed.
template <class F>
std::pair<MeanInterval, MeanInterval> paired_over_seeds(const std::vector<const RunData*>& rs,
                                                        const std::vector<const RunData*>& full, const F& value) {
  std::vector<double> v, d;
  for (const RunData* r : rs) {
    v.push_back(value(*r));
    for (const RunData* f : full)
      if (f->seed == r->seed) d.push_back(value(*r) - value(*f));
  }
  return {mean_interval(v), mean_interval(d)};
}

// One row of summary.csv: regime,source,metric,n,mean,lo95,hi95.
std::string summary_csv_row(const std::string& g, const std::string& source, const std::string& metric, int n,
                            double mean, double lo, double hi) {
  return str_cat(csv_field(g), ",", source, ",", csv_field(metric), ",", n, ",", full_precision(mean), ",",
                 full_precision(lo), ",", full_precision(hi), "\n");
}


using DistanceBucket = std::pair<int, json>;  // (lo, hi: null for the open last bucket)

// The distance buckets of the first run that has a retrieval evaluation (none without).
std::vector<DistanceBucket> distance_buckets(const std::vector<RunData>& runs) {
  std::vector<DistanceBucket> buckets;
  for (const auto& r : runs)
    if (r.eval.contains("retrieval") && buckets.empty())
      for (const auto& b : r.eval["retrieval"]["buckets"])
        buckets.push_back({b["lo"].get<int>(), b.value("hi", json())});
  return buckets;
}

// "0-63", "128+".
std::string bucket_label(const DistanceBucket& b) {
  return str_cat(b.first, b.second.is_number() ? str_cat("-", b.second.get<int>() - 1) : "+");
}

// A run's retrieval accuracy in the bucket starting at lo; NaN without a retrieval evaluation or a question there.
double retrieval_accuracy(const RunData& r, int lo) {
  if (!r.eval.contains("retrieval")) return NAN;
  for (const auto& b : r.eval["retrieval"]["buckets"])
    if (b["lo"].get<int>() == lo && b["accuracy"].is_number()) return b["accuracy"].get<double>();
  return NAN;
}

struct KeptCount {
  Proportion kept;         // k of n seeds kept retrieval, with the Clopper-Pearson 95% interval
  std::vector<int> seeds;  // the n seeds counted
};

// The runs rs that kept retrieval in the bucket at lo, counted over the seeds whose full run (`full`, same seed)
// kept it there; over all of rs when `full` is empty (full itself, or a suite without full).
KeptCount retrieval_kept(const std::vector<const RunData*>& rs, const std::vector<const RunData*>& full, int lo) {
  KeptCount c;
  int k = 0;
  for (const RunData* r : rs) {
    const RunData* f = seed_run(full, r->seed);
    const bool full_kept = full.empty() || (f && retrieval_accuracy(*f, lo) >= kRetrievalKept);
    const double acc = retrieval_accuracy(*r, lo);
    if (!full_kept || !std::isfinite(acc)) continue;
    c.seeds.push_back(r->seed);
    k += acc >= kRetrievalKept;
  }
  c.kept = clopper_pearson(k, int(c.seeds.size()));
  return c;
}

json kept_json(const KeptCount& c, const DistanceBucket& far, bool only_full_kept) {
  const Proportion& p = c.kept;
  return {{"threshold", kRetrievalKept},
          {"bucket_lo", far.first},
          {"bucket_hi", far.second},
          {"k", p.k},
          {"n", p.n},
          {"fraction", p.n ? json(double(p.k) / p.n) : json()},
          {"lo95", p.lo},
          {"hi95", p.hi},
          {"interval", "clopper-pearson"},
          {"seeds", c.seeds},
          {"only_seeds_full_kept", only_full_kept}};
}

// "- **g**: retrieval kept in k of n seeds (95% CI [lo, hi], Clopper-Pearson).\n"
std::string kept_sentence(const std::string& g, const KeptCount& c) {
  const Proportion& p = c.kept;
  if (p.n == 0)
    return str_cat("- **", g, "**: no seed to count (",
                   g == "full" ? "no retrieval accuracy at that distance" : "full kept retrieval in none of its seeds",
                   ").\n");
  return str_cat("- **", g, "**: retrieval kept in ", p.k, " of ", p.n, " seeds (95% CI [", fixed(p.lo, 3), ", ",
                 fixed(p.hi, 3), "], Clopper-Pearson).\n");
}

// The summary's retrieval verdict for a regime from its paired differences from full, (bucket label, Δ) per bucket.
std::string retrieval_verdict(const std::vector<std::pair<std::string, MeanInterval>>& deltas) {
  std::string differs;
  double bound = 0;
  int paired = 0;
  for (const auto& [label, d] : deltas) {
    paired = std::max(paired, d.n);
    if (d.n < 2) continue;
    bound = std::max(bound, equivalence_bound90(d));
    if (d.lo > 0 || d.hi < 0)
      differs +=
          str_cat(differs.empty() ? "" : ", ", "distance ", label, ": ", d.mean > 0 ? "+" : "", fixed(d.mean, 3));
  }
  if (paired == 0) return "no seed paired with full: no claim";
  if (paired < 2) return "one seed: no claim";
  if (!differs.empty()) return "differs at " + differs;
  return str_cat("no difference detected in any distance bucket (equivalent within ±", fixed(bound, 3),
                 " in every bucket)");
}

// Retrieval accuracy by DEF-ASK distance (synth data): per regime the mean over seeds and the paired difference
// from full per bucket, and the all-or-nothing count of seeds that kept retrieval at the farthest distance.
struct RetrievalSection {
  Table table;          // accuracy per bucket, mean over seeds
  std::string kept_md;  // kept_sentence per regime
  std::string note;     // what "kept" means and which seeds count
  std::string summary;  // the summary's line per regime but full
  std::string csv;      // summary.csv rows, source "retrieval"
  json regimes = json::array();
};

// One regime's part of the section.
void retrieval_add_regime(RetrievalSection& s, const std::string& g, const std::vector<RunData>& runs,
                          const std::vector<DistanceBucket>& buckets, const DistanceBucket& far) {
  const auto rs = regime_runs(runs, g), full = regime_runs(runs, "full");
  std::vector<std::string> row = {g};
  json jr = {{"regime", g}, {"buckets", json::array()}};
  std::vector<std::pair<std::string, MeanInterval>> deltas;
  for (const DistanceBucket& b : buckets) {
    const int lo = b.first;
    const auto [m, d] = paired_over_seeds(rs, full, [lo](const RunData& r) { return retrieval_accuracy(r, lo); });
    row.push_back(cell(m, 3));
    jr["buckets"].push_back({{"lo", lo}, {"hi", b.second}, {"accuracy", interval_json(m)},
                             {"delta_vs_full", with_equivalence(interval_json(d), d)}});
    deltas.push_back({bucket_label(b), d});
    s.csv += summary_csv_row(g, "retrieval", "accuracy_" + bucket_label(b), m.n, m.mean, m.lo, m.hi);
  }
  const bool only_full_kept = g != "full" && !full.empty();
  const KeptCount kept = retrieval_kept(rs, only_full_kept ? full : std::vector<const RunData*>(), far.first);
  const Proportion& p = kept.kept;
  jr["kept"] = kept_json(kept, far, only_full_kept);
  s.csv += summary_csv_row(g, "retrieval", "kept", p.n, p.n ? double(p.k) / p.n : NAN, p.lo, p.hi);
  s.kept_md += kept_sentence(g, kept);
  s.table.rows.push_back(row);
  s.regimes.push_back(jr);
  if (only_full_kept)
    s.summary += str_cat("- **", g, "** retrieval accuracy vs full: ", retrieval_verdict(deltas), ".\n");
}

RetrievalSection retrieval_section(const std::vector<RunData>& runs, const std::vector<std::string>& regimes) {
  RetrievalSection s;
  const std::vector<DistanceBucket> buckets = distance_buckets(runs);
  if (buckets.empty()) return s;
  const DistanceBucket far = *std::max_element(buckets.begin(), buckets.end(), [](const auto& a, const auto& b) {
    return a.first < b.first;
  });
  s.table.header = {"regime"};
  for (const DistanceBucket& b : buckets) s.table.header.push_back("accuracy " + bucket_label(b));
  for (const auto& g : regimes) retrieval_add_regime(s, g, runs, buckets, far);
  const bool have_full = std::find(regimes.begin(), regimes.end(), "full") != regimes.end();
  s.note = str_cat(
      "Kept: a run keeps retrieval when its accuracy at the farthest distance (", bucket_label(far), ") is at least ",
      fixed(kRetrievalKept, 2), ". That is all or nothing per seed, so it is counted: k of n seeds, with the exact "
      "binomial (Clopper-Pearson) 95% interval for k / n, which stays within [0, 1]. ",
      have_full ? "Only the seeds whose full-attention run itself kept retrieval there count for the other regimes "
                  "(a regime cannot keep what full never had); full's count is over all its seeds. "
                : "No full run: every seed counts. ",
      "Accuracy cells: mean over seeds ± half-width of the 95% t-interval.");
  return s;
}

// Far copies on any corpus (eval.json's far_copy, eval/far_copy.h): per distance bucket the loss on tokens a copy
// from that distance predicts, beside frequency-matched novel tokens. Per regime and bucket, paired against full by
// seed: how much the copies' loss rose beyond the control's, (copy - control) - full's (copy - control).
struct FarCopySection {
  Table table;          // per regime and bucket: copies' loss / control's loss, mean over seeds
  Table delta;          // per regime but full and bucket: the paired excess, mean ± 95% half-width
  std::string summary;  // the summary's line per regime but full
  std::string csv;      // summary.csv rows, source "far_copy"
  json regimes = json::array();
};

// A run's far-copy number in the bucket starting at lo ("loss" or "control_loss"); NaN where missing.
double far_copy_value(const RunData& r, int lo, const char* key) {
  if (!r.eval.contains("far_copy")) return NAN;
  for (const auto& b : r.eval["far_copy"]["buckets"])
    if (b["lo"].get<int>() == lo && b[key].is_number()) return b[key].get<double>();
  return NAN;
}

FarCopySection far_copy_section(const std::vector<RunData>& runs, const std::vector<std::string>& regimes) {
  FarCopySection s;
  std::vector<DistanceBucket> buckets;  // (lo, hi) of the first run that has far_copy
  for (const auto& r : runs)
    if (r.eval.contains("far_copy") && buckets.empty())
      for (const auto& b : r.eval["far_copy"]["buckets"]) buckets.push_back({b["lo"].get<int>(), b.value("hi", json())});
  if (buckets.empty()) return s;
  s.table.header = s.delta.header = {"regime"};
  for (const DistanceBucket& b : buckets) {
    s.table.header.push_back("copies / control " + bucket_label(b));
    s.delta.header.push_back("excess vs full " + bucket_label(b));
  }
  const auto full = regime_runs(runs, "full");
  for (const auto& g : regimes) {
    const auto rs = regime_runs(runs, g);
    std::vector<std::string> row = {g}, drow = {g};
    json jr = {{"regime", g}, {"buckets", json::array()}};
    std::string differs;
    double bound = 0;
    int paired = 0;
    for (const DistanceBucket& b : buckets) {
      const int lo = b.first;
      const auto [copy, dcopy] = paired_over_seeds(rs, full, [lo](const RunData& r) { return far_copy_value(r, lo, "loss"); });
      const auto [ctrl, dctrl] =
          paired_over_seeds(rs, full, [lo](const RunData& r) { return far_copy_value(r, lo, "control_loss"); });
      const auto [ex, dex] = paired_over_seeds(rs, full, [lo](const RunData& r) {
        return far_copy_value(r, lo, "loss") - far_copy_value(r, lo, "control_loss");
      });
      row.push_back(str_cat(cell(copy, 3), " / ", cell(ctrl, 3)));
      drow.push_back(dex.n ? str_cat(dex.mean >= 0 ? "+" : "", cell(dex, 3)) : "–");
      jr["buckets"].push_back({{"lo", lo}, {"hi", b.second}, {"loss", interval_json(copy)},
                               {"control_loss", interval_json(ctrl)},
                               {"delta_loss_vs_full", with_equivalence(interval_json(dcopy), dcopy)},
                               {"delta_control_vs_full", with_equivalence(interval_json(dctrl), dctrl)},
                               {"excess_vs_full", with_equivalence(interval_json(dex), dex)}});
      s.csv += summary_csv_row(g, "far_copy", "loss_" + bucket_label(b), copy.n, copy.mean, copy.lo, copy.hi);
      if (g == "full") continue;
      s.csv += summary_csv_row(g, "far_copy", "excess_vs_full_" + bucket_label(b), dex.n, dex.mean, dex.lo, dex.hi);
      paired = std::max(paired, dex.n);
      if (dex.n < 2) continue;
      bound = std::max(bound, equivalence_bound90(dex));
      if (dex.lo > 1e-9 || dex.hi < -1e-9)  // (not a rounding error of equal differences)
        differs += str_cat(differs.empty() ? "" : ", ", "distance ", bucket_label(b), ": ", dex.mean > 0 ? "+" : "",
                           fixed(dex.mean, 3), " nats (95% CI [", fixed(dex.lo, 3), ", ", fixed(dex.hi, 3), "])");
    }
    s.table.rows.push_back(row);
    s.regimes.push_back(jr);
    if (g == "full" || full.empty()) continue;
    s.delta.rows.push_back(drow);
    const std::string v = paired == 0 ? "no seed paired with full: no claim"
                          : paired < 2 ? "one seed: no claim"
                          : !differs.empty()
                              ? "beyond the frequency-matched control, " + differs
                              : str_cat("no difference detected beyond the frequency-matched control in any distance "
                                        "bucket (equivalent within ±", fixed(bound, 3), " nats in every bucket)");
    s.summary += str_cat("- **", g, "** far copies (real text) vs full: ", v, ".\n");
  }
  return s;
}

}  // namespace

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

double report_loss_at_time(const std::vector<LossAtTime>& c, double seconds) {
  for (size_t i = 0; i < c.size(); i++) {
    if (!(c[i].seconds >= seconds)) continue;
    if (c[i].seconds == seconds) return c[i].loss;
    if (i == 0) return NAN;
    const LossAtTime &a = c[i - 1], &b = c[i];  // a.seconds < seconds < b.seconds
    return a.loss + (seconds - a.seconds) / (b.seconds - a.seconds) * (b.loss - a.loss);
  }
  return NAN;
}

double report_time_to_loss(const std::vector<LossAtTime>& c, double target) {
  if (!std::isfinite(target)) return NAN;
  for (size_t i = 0; i < c.size(); i++) {
    if (!(c[i].loss <= target)) continue;
    if (i == 0 || !std::isfinite(c[i - 1].loss)) return c[i].seconds;
    const LossAtTime &a = c[i - 1], &b = c[i];  // a.loss > target >= b.loss
    return a.seconds + (a.loss - target) / (a.loss - b.loss) * (b.seconds - a.seconds);
  }
  return NAN;
}

// Time to loss in interleaved time (issue 40): when timing.json times every regime of the report, a run's training
// seconds at step s are s x its regime's median step time there (measured side by side in one process, so a busy
// machine during one run does not move them), x 1 / (1 - the run's mean measuring share) for the policies that
// measure attention as they train (coverage_time_share in metrics.jsonl; timing.json times the windows, not the
// measuring). Returns false, and leaves the logged seconds, when some regime is not timed.
bool report_use_interleaved_time(std::vector<RunData>& runs, const json& timing) {
  if (timing.is_null()) return false;
  for (const RunData& r : runs)
    if (timing_of(timing, r.regime).is_null()) return false;
  for (RunData& r : runs) {
    double share = 0;
    int n = 0;
    for (const json& j : r.lines)
      if (j.contains("coverage_time_share") && j["coverage_time_share"].is_number())
        share += j["coverage_time_share"].get<double>(), n++;
    share = n ? std::clamp(share / n, 0.0, 0.9) : 0.0;
    const double step_s = timing_of(timing, r.regime)["train_ms"]["median"].get<double>() / 1000 / (1 - share);
    for (LossAtTime& c : r.curve) c.seconds = c.step * step_s;
  }
  return true;
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

bool report_owns_file(const std::string& existing, const std::string& now) {
  auto first_line = [](const std::string& t) { return t.substr(0, t.find('\n')); };
  if (now.rfind("# aah suite report\n", 0) == 0) return existing.rfind("# aah suite report\n", 0) == 0;
  if (now.rfind("<!DOCTYPE html>", 0) == 0)
    return existing.substr(0, 400).find("<title>aah suite report</title>") != std::string::npos;
  if (now.rfind("{", 0) == 0) {  // report.json: an object with the suite and its runs
    const json j = json::parse(existing, nullptr, false);
    return j.is_object() && j.contains("suite") && j.contains("runs") && j.contains("regimes");
  }
  // A CSV: the header's first two columns (a later aah may add columns to the same file)
  auto lead = [&](const std::string& t) {
    const std::string h = first_line(t);
    const size_t comma = h.find(',');
    return comma == std::string::npos ? h : h.substr(0, h.find(',', comma + 1));
  };
  return lead(existing) == lead(now);
}

void report_check_eval(const json& e, const std::string& name) {
  if (!e.is_object()) fail("[report] ", name, ": not a JSON object");
  for (const char* k : {"val_loss", "val_ppl", "inference_acr", "pair_ratio", "attn_work_ratio", "tokens_per_s",
                        "peak_rss_mb"})
    number(e, k, name);
  if (!e.contains("window_fractions") || !e["window_fractions"].is_object())
    fail("[report] ", name, ": 'window_fractions' is missing or not an object");
  for (const auto& item : e["window_fractions"].items()) {
    const std::string& w = item.key();
    if (w.empty() || w.size() > 9 || w.find_first_not_of("0123456789") != std::string::npos || !item.value().is_number())
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

void report_write(const std::string& dir) {
  // The runs: every DIR/runs/<name>/ with an eval.json (unfinished ones are listed, not tabled).
  std::vector<std::string> names, unfinished;
  const std::string runs_dir = dir + "/runs";
  if (DIR* d = opendir(runs_dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    closedir(d);
  } else {
    fail("[report] ", runs_dir, ": no such directory (is ", dir, " a suite directory?)");
  }
  std::sort(names.begin(), names.end());
  std::vector<RunData> runs;
  for (const auto& n : names) {
    const std::string rd = runs_dir + "/" + n;
    if (!file_exists(rd + "/eval.json")) {
      unfinished.push_back(n);
      continue;
    }
    runs.push_back(read_run(rd, n));
  }
  json suite = file_exists(dir + "/suite.json") ? read_json_file(dir + "/suite.json") : json::object();
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

  // Regimes in the suite's order (full first when present), then any others found.
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
  auto runs_of = [&](const std::string& g) { return regime_runs(runs, g); };
  const bool have_full = std::find(regimes.begin(), regimes.end(), "full") != regimes.end();
  // Paired difference from full attention: per seed present in both.
  // A per-run number over regime g's seeds (mean, interval) and its paired difference from full (same seeds).
  auto over_seeds = [&](const std::string& g, const auto& value) {
    return paired_over_seeds(runs_of(g), runs_of("full"), value);
  };
  auto paired = [&](const std::string& g, const Column& c) {
    return over_seeds(g, [&](const RunData& r) { return value_of(r, c); }).second;
  };
  // Time side by side (timing.json): the time-to-loss curves in interleaved time when every regime is timed.
  const json timing = read_timing(dir + "/timing.json");
  const bool interleaved_time = report_use_interleaved_time(runs, timing);
  // Time to loss: the training seconds at which a run's validation curve first reaches the final validation loss of
  // full's run of the same seed (NaN: not reached, or no such full run), and its ratio to full's own time to it.
  auto full_of = [&](const RunData& r) -> const RunData* {
    for (const RunData* f : runs_of("full"))
      if (f->seed == r.seed) return f;
    return nullptr;
  };
  auto train_seconds = [](const RunData& r) { return r.curve.back().seconds; };
  auto time_to_full_loss = [&](const RunData& r) {
    const RunData* f = full_of(r);
    return f ? report_time_to_loss(r.curve, f->train.at("val_loss")) : NAN;
  };
  auto time_to_full_loss_ratio = [&](const RunData& r) {
    const RunData* f = full_of(r);
    return f ? time_to_full_loss(r) / time_to_full_loss(*f) : NAN;
  };
  // At equal time: the run's final validation loss minus full's (same seed) after as many training seconds.
  auto delta_at_equal_time = [&](const RunData& r) {
    const RunData* f = full_of(r);
    return f ? r.train.at("val_loss") - report_loss_at_time(f->curve, train_seconds(r)) : NAN;
  };

  json out = {{"suite", suite}, {"runs", json::array()}, {"regimes", json::array()}, {"unfinished", unfinished}};
  Table train_t, eval_t, diff_t;
  train_t.header = {"regime", "grouping", "hierarchy", "joint scorer", "context", "seeds"};
  for (const auto& c : kTrainColumns) train_t.header.push_back(c.header);
  eval_t.header = {"regime", "seeds"};
  for (const auto& c : kEvalColumns) eval_t.header.push_back(c.header);
  diff_t.header = {"regime", "seeds paired", "Δ training val loss", "Δ inference val loss", "Δ inference tokens/s"};
  std::string csv_summary = "regime,source,metric,n,mean,lo95,hi95\n";
  for (const auto& g : regimes) {
    const auto rs = runs_of(g);
    std::vector<std::string> row = {g};
    for (const auto& s : regime_columns(*rs[0])) row.push_back(s);
    row.push_back(std::to_string(rs[0]->cfg.train.context));
    row.push_back(std::to_string(rs.size()));
    json jr = {{"regime", g}, {"seeds", json::array()}};
    for (const RunData* r : rs) jr["seeds"].push_back(r->seed);
    // One table's numeric cells for this regime: mean (and interval) over its seeds, also into JSON and CSV.
    auto add_cells = [&](const auto& columns, const char* source, std::vector<std::string>& cells) {
      for (const Column& c : columns) {
        std::vector<double> v;
        for (const RunData* r : rs) v.push_back(value_of(*r, c));
        const MeanInterval m = mean_interval(v);
        cells.push_back(cell(m, c.decimals));
        jr[source][c.key] = interval_json(m);
        csv_summary += str_cat(csv_field(g), ",", source, ",", c.key, ",", m.n, ",", full_precision(m.mean), ",",
                               full_precision(m.lo), ",", full_precision(m.hi), "\n");
      }
    };
    add_cells(kTrainColumns, "train", row);
    train_t.rows.push_back(row);
    std::vector<std::string> erow = {g, std::to_string(rs.size())};
    add_cells(kEvalColumns, "eval", erow);
    eval_t.rows.push_back(erow);
    if (have_full && g != "full") {
      const MeanInterval dt = paired(g, kTrainColumns[0]), de = paired(g, kEvalColumns[0]),
                         ds = paired(g, kEvalColumns[5]);
      diff_t.rows.push_back({g, std::to_string(dt.n), cell(dt, 4), cell(de, 4), cell(ds, 0)});
      jr["paired_vs_full"] = {{"train_val_loss", with_equivalence(interval_json(dt), dt)},
                              {"eval_val_loss", with_equivalence(interval_json(de), de)},
                              {"eval_tokens_per_s", with_equivalence(interval_json(ds), ds)}};
    }
    out["regimes"].push_back(jr);
  }

  // Time side by side (timing.json) and the headline: each regime's Δ validation loss against its cost.
  Table time_t;
  time_t.header = {"regime", "timed map (run)", "pair ratio", "train step ms", "step time ratio vs full",
                   "eval batch ms", "eval time ratio vs full"};
  std::string summary_md;
  SvgLineChart by_time, by_work;
  by_time.title = "Quality against time";
  by_time.x_label = "training step time / full's (side by side, median)";
  by_work.title = "Quality against attention work";
  by_work.x_label = "attention work ratio (executed / full, mean over training)";
  for (SvgLineChart* c : {&by_time, &by_work}) {
    c->y_label = "Δ validation loss vs full (nats, mean, 95% CI)";
    c->points = true, c->ref_y = 0, c->ref_x = 1;
  }
  json headline = json::array();
  for (const auto& g : regimes) {
    const json t = timing_of(timing, g);
    if (!t.is_null())
      time_t.rows.push_back({g, t.value("run", std::string("?")), fixed(t["pair_ratio"].get<double>(), 4),
                             stat_cell(t["train_ms"], 1), g == "full" ? "1" : stat_cell(t["train_ratio"], 3),
                             stat_cell(t["eval_ms"], 1), g == "full" ? "1" : stat_cell(t["eval_ratio"], 3)});
    std::vector<double> work;
    for (const RunData* r : runs_of(g)) work.push_back(r->train.at("work_ratio"));
    const double work_ratio = mean_interval(work).mean;
    if (!have_full) continue;
    MeanInterval d;
    if (g == "full") {
      d.n = int(runs_of(g).size());
    } else {
      d = paired(g, kEvalColumns[0]);
    }
    const double time_ratio = t.is_null() ? NAN : g == "full" ? 1.0 : t["train_ratio"]["median"].get<double>();
    const bool time_flagged = !t.is_null() && g != "full" && t["train_ratio"]["flagged"].get<bool>();
    headline.push_back({{"regime", g},
                        {"delta_val_loss", with_equivalence(interval_json(d), d)},
                        {"step_time_ratio", t.is_null() ? json(nullptr) : json(time_ratio)},
                        {"step_time_ratio_flagged", time_flagged},
                        {"work_ratio", work_ratio}});
    for (auto [chart, x] : {std::pair{&by_time, time_ratio}, std::pair{&by_work, work_ratio}}) {
      SvgSeries p;
      p.name = g, p.x = {x}, p.y = {d.mean};
      if (d.n >= 2) p.y_lo = {d.lo}, p.y_hi = {d.hi};
      chart->series.push_back(p);
    }
    if (g == "full") continue;
    std::string time_text = "not timed (no timing.json)";
    if (!t.is_null())
      time_text = time_flagged ? str_cat("step time ratio ", fixed(time_ratio, 3), " flagged (spread ",
                                         fixed(100 * t["train_ratio"]["spread"].get<double>(), 1), "%: not a result)")
                               : str_cat("step time ", fixed(time_ratio, 3), " of full's");
    summary_md += str_cat("- **", g, "**: validation loss: ", verdict(d, 4, " nats"), "; ", time_text,
                          "; attention work ", fixed(work_ratio, 3), " of full's.\n");
  }

  // Time to loss: does a regime reach full's final validation loss sooner (in training seconds)?
  Table ttl_t;
  ttl_t.header = {"regime",
                  "seeds",
                  "final val loss",
                  "training s",
                  "time to full's final val loss (s)",
                  "ratio to full's time",
                  "Δ val loss vs full at equal time"};
  json ttl_json = json::array();
  std::string ttl_md;  // one sentence per regime
  for (const auto& g : regimes) {
    const auto rs = runs_of(g);
    std::vector<double> loss, secs, ttl, ratio, equal;
    for (const RunData* r : rs) {
      loss.push_back(r->train.at("val_loss")), secs.push_back(train_seconds(*r));
      ttl.push_back(time_to_full_loss(*r)), ratio.push_back(time_to_full_loss_ratio(*r));
      equal.push_back(delta_at_equal_time(*r));
    }
    const MeanInterval ml = mean_interval(loss), ms = mean_interval(secs), mt = mean_interval(ttl),
                       mr = mean_interval(ratio), me = mean_interval(equal);
    // mean_interval counts the finite values: the seeds that reached the loss.
    auto reached_cell = [&](const MeanInterval& m, int decimals) {
      if (!have_full) return std::string("–");
      if (m.n == 0) return std::string("not reached");
      return cell(m, decimals) + (size_t(m.n) < rs.size() ? str_cat(" (", m.n, " of ", rs.size(), " seeds)") : "");
    };
    // NaN: full trained for less time than this run (or no full): no loss of full's at that time.
    const std::string equal_cell = !have_full || g == "full" ? std::string("–")
                                   : me.n == 0               ? std::string("full trained less long")
                                                             : reached_cell(me, 4);
    ttl_t.rows.push_back({g, std::to_string(rs.size()), cell(ml, 4), cell(ms, 1), reached_cell(mt, 1),
                          reached_cell(mr, 3), equal_cell});
    ttl_json.push_back({{"regime", g},
                        {"seeds", rs.size()},
                        {"final_val_loss", interval_json(ml)},
                        {"train_seconds", interval_json_or_null(ms)},
                        {"time_to_full_loss_s", interval_json_or_null(mt)},
                        {"ratio_to_full", interval_json_or_null(mr)},
                        {"reached", have_full ? json(mt.n) : json(nullptr)},
                        {"delta_val_loss_at_equal_time", with_equivalence(interval_json_or_null(me), me)}});
    for (const auto& [metric, m] : {std::pair{"train_time_s", ms}, std::pair{"time_to_full_loss_s", mt},
                                    std::pair{"time_to_full_loss_ratio", mr},
                                    std::pair{"delta_val_loss_at_equal_time", me}})
      csv_summary += str_cat(csv_field(g), ",time_to_loss,", metric, ",", m.n, ",", full_precision(m.n ? m.mean : NAN),
                             ",", full_precision(m.n ? m.lo : NAN), ",", full_precision(m.n ? m.hi : NAN), "\n");
    if (!have_full || g == "full" || ms.n == 0) continue;  // no full, or no training time in the logs
    // Full's own time to its final loss, on the seeds this regime reached it.
    std::vector<double> full_ttl;
    for (const RunData* r : rs)
      if (const RunData* f = full_of(*r); f && std::isfinite(time_to_full_loss(*r)))
        full_ttl.push_back(time_to_full_loss(*f));
    const double full_s = mean_interval(full_ttl).mean;
    ttl_md +=
        mt.n == 0
            ? str_cat("- **", g, "** did not reach full's final validation loss in its ", fixed(ms.mean, 1),
                      " s of training (final ", fixed(ml.mean, 4), ").")
            : str_cat("- **", g, "** reached full's final validation loss after ", fixed(mt.mean, 1), " s of training",
                      size_t(mt.n) < rs.size() ? str_cat(" (", mt.n, " of ", rs.size(), " seeds)") : "", ", ",
                      fixed(mr.mean, 3), " of full's time (", fixed(full_s, 1), " s)",
                      mr.n >= 2 ? str_cat(", 95% CI [", fixed(mr.lo, 3), ", ", fixed(mr.hi, 3), "]") : "", ".");
    if (me.n > 0)
      ttl_md += str_cat(" At equal training time (its ", fixed(ms.mean, 1), " s), its validation loss against full's: ",
                        verdict(me, 4, " nats"), ".");
    ttl_md += "\n";
  }
  const std::string ttl_note = interleaved_time ?
      "Training seconds are interleaved time: at each evaluation, the steps so far x the regime's training step time "
      "measured side by side with the others in one process (timing.json, median; its final window map), x 1 / (1 - "
      "the run's mean share of time spent measuring attention, for the coverage and copy policies). So a run that "
      "shared the machine with other work is not slower for it, and no run's time includes evaluation. The target is "
      "the final validation loss (training evaluation, train.eval_windows windows) of full's run of the same seed; the "
      "time to reach it is interpolated linearly between the evaluation before and the first at or below it; the ratio "
      "is to full's own time to that loss, per seed. At equal time: the run's final validation loss minus full's loss "
      "after as many seconds of training (interpolated between full's evaluations; same seed). A regime whose windows "
      "changed during training is timed at its final windows." :
      "Training seconds exclude evaluation: at each evaluation, the run's training time so far, summed over its log "
      "intervals as tokens / (tokens/s) from metrics.jsonl (`aah train` times its throughput between log lines, "
      "leaving out the evaluation and the logging; elapsed_s would count the earlier evaluations). The target is the "
      "final validation loss (training evaluation, train.eval_windows windows) of full's run of the same seed; the "
      "time to reach it is interpolated linearly between the evaluation before and the first at or below it; the ratio "
      "is to full's own time to that loss, per seed. At equal time: the run's final validation loss minus full's loss "
      "after as many seconds of training (interpolated between full's evaluations; same seed), so a cheaper regime is "
      "compared with full stopped at the same cost. These are logged times (no timing.json timing every regime): the "
      "runs of a suite train one after another, so their times compare only as far as the machine's load stayed the "
      "same.";

  // Retrieval accuracy by DEF-ASK distance (synth data), with the seeds that kept retrieval at the farthest distance.
  const RetrievalSection retr = retrieval_section(runs, regimes);
  summary_md += retr.summary;  // empty without full
  csv_summary += retr.csv;
  // Far copies by distance (any corpus), against a frequency-matched control, paired with full by seed.
  const FarCopySection far = far_copy_section(runs, regimes);
  summary_md += far.summary;
  for (const RunData& r : runs) summary_md += nonfinite_note(r);  // diverged runs are results too, and marked
  csv_summary += far.csv;
  const std::string far_note = str_cat(
      "A far copy at distance d: a token that the continuation of the closest earlier occurrence of the n-gram before "
      "it predicts (n = ", kFarCopyNgram, "), that occurrence d tokens back; a window <= d hides it. Control: tokens "
      "with no earlier occurrence in the window, matched to each bucket's copies by frequency class (floor(log2(count))"
      " over the evaluated tokens). Excess vs full: (copies' loss - control's loss) minus full's, paired by seed, mean "
      "± 95% half-width: above 0 when the regime made far copies harder than tokens it could not copy anyway.");

  // The heads that matter (probe.json of a full run, synth data): per head the attention mass on the DEF and the
  // retrieval accuracy drop when that head alone is cut, beside each regime's final window of the same (layer,
  // head) in its run of the same seed. One seed, the lowest probed: a head index names nothing across seeds, while
  // runs of one seed start from the same weights and see the same batches. A head matters at a drop of at least
  // kHeadMatters.
  constexpr double kHeadMatters = 0.10;
  Table heads_t;
  json heads_json = json::array();
  std::string heads_note;
  const RunData* probed = nullptr;
  for (const RunData* r : runs_of("full"))
    if (!r->probe.is_null() && (!probed || r->seed < probed->seed)) probed = r;
  if (probed) {
    const int T = probed->cfg.train.context, cut = probed->probe.value("cut_window", 0);
    auto same_seed = [&](const std::string& g) -> const RunData* {
      for (const RunData* r : runs_of(g))
        if (r->seed == probed->seed) return r;
      return nullptr;
    };
    std::vector<json> rows(probed->probe["heads"].begin(), probed->probe["heads"].end());  // checked on reading
    std::stable_sort(rows.begin(), rows.end(), [](const json& a, const json& b) {
      return a["accuracy_drop"].get<double>() > b["accuracy_drop"].get<double>();
    });
    heads_t.header = {"head (layer.head)", "DEF mass", str_cat("accuracy drop, cut to ", cut)};
    for (const auto& g : regimes)
      if (g != "full") heads_t.header.push_back(g + " window");
    std::vector<std::string> matter;
    for (size_t i = 0; i < rows.size(); i++) {
      const int l = rows[i]["layer"].get<int>(), h = rows[i]["head"].get<int>();
      const double mass = rows[i]["def_mass"].get<double>(), drop = rows[i]["accuracy_drop"].get<double>();
      const bool matters = drop >= kHeadMatters;
      if (matters) matter.push_back(str_cat(l, ".", h));
      json jh = {{"layer", l}, {"head", h}, {"def_mass", mass}, {"accuracy_drop", drop}, {"matters", matters},
                 {"windows", json::object()}};
      std::vector<std::string> row = {str_cat(l, ".", h, matters ? " *" : ""), fixed(mass, 3), fixed(drop, 3)};
      for (const auto& g : regimes) {
        if (g == "full") continue;
        const RunData* r = same_seed(g);
        const json& map = r ? r->eval["window_map"] : json();
        const bool has = r && size_t(l) < map.size() && size_t(h) < map[size_t(l)].size();
        row.push_back(has ? std::to_string(map[size_t(l)][size_t(h)].get<int>()) : "–");
        jh["windows"][g] = has ? map[size_t(l)][size_t(h)] : json();
      }
      heads_json.push_back(jh);
      if (i < 8 || matters) heads_t.rows.push_back(row);  // the 8 that matter most, and every one that matters
    }
    heads_note = str_cat(
        "Probe of full-s", probed->seed, " at full windows, context ", T, " (`aah probe heads`): DEF mass = "
        "attention probability from the query that predicts a question's value to its DEF k v; accuracy drop = "
        "retrieval accuracy with every head full minus with this head alone cut to window ", cut, ". Heads sorted by "
        "the drop; * = the head matters (drop >= ", fixed(kHeadMatters, 2), "). Window columns: the final window of the "
        "same (layer, head) in each regime's seed-", probed->seed, " run (same initial weights and batches; a head "
        "index names nothing across seeds, so seeds are not averaged). The other seeds' probes are in their runs' "
        "probe.json.");
    if (have_full) {
      std::string list;
      for (const auto& m : matter) list += (list.empty() ? "" : ", ") + m;
      summary_md += matter.empty()
                        ? str_cat("- **Heads that matter** (full-s", probed->seed, "): no single head's cut drops "
                                  "retrieval accuracy by ", fixed(kHeadMatters, 2), " or more.\n")
                        : str_cat("- **Heads that matter** for retrieval (full-s", probed->seed, ", accuracy drop >= ",
                                  fixed(kHeadMatters, 2), " when cut alone): ", list,
                                  ". Their final windows per regime are in the heads table.\n");
    }
  }

  // Loss by position in the context (eval.json's loss_by_position): mean per bucket, and the paired Δ vs full.
  std::vector<int> pos_starts;
  for (const auto& r : runs)
    if (r.eval.contains("loss_by_position") && pos_starts.empty())
      for (const auto& v : r.eval["loss_by_position"]["start"]) pos_starts.push_back(v.get<int>());
  auto pos_loss = [&](const RunData& r, size_t i) -> double {
    if (!r.eval.contains("loss_by_position")) return NAN;
    const json& lp = r.eval["loss_by_position"];
    if (i >= lp["start"].size() || lp["start"][i].get<int>() != pos_starts[i] || !lp["loss"][i].is_number()) return NAN;
    return lp["loss"][i].get<double>();
  };
  SvgLineChart pos_chart, pos_delta;
  pos_chart.title = "Validation loss by position in the context";
  pos_delta.title = "Δ validation loss vs full by position";
  pos_chart.x_label = pos_delta.x_label = "position of the predicted token (bucket start)";
  pos_chart.y_label = "validation loss (nats/token, mean over seeds)";
  pos_delta.y_label = "Δ loss vs full (nats, mean, 95% CI)";
  pos_delta.ref_y = 0;
  std::string csv_pos = "regime,bucket_start,n,mean,lo95,hi95,delta_n,delta_mean,delta_lo95,delta_hi95\n";
  for (const auto& g : regimes) {
    if (pos_starts.empty()) break;
    SvgSeries a, d;
    a.name = d.name = g;
    d.color = int(pos_chart.series.size());  // full has no Δ line: the others keep their colours of the other figures
    for (size_t i = 0; i < pos_starts.size(); i++) {
      const auto [m, dm] = over_seeds(g, [&](const RunData& r) { return pos_loss(r, i); });
      a.x.push_back(pos_starts[i]), a.y.push_back(m.n ? m.mean : NAN);
      d.x.push_back(pos_starts[i]), d.y.push_back(dm.n ? dm.mean : NAN);
      d.y_lo.push_back(dm.n >= 2 ? dm.lo : NAN), d.y_hi.push_back(dm.n >= 2 ? dm.hi : NAN);
      csv_pos += str_cat(csv_field(g), ",", pos_starts[i], ",", m.n, ",", full_precision(m.mean), ",",
                         full_precision(m.lo), ",", full_precision(m.hi), ",", dm.n, ",", full_precision(dm.mean), ",",
                         full_precision(dm.lo), ",", full_precision(dm.hi), "\n");
    }
    pos_chart.series.push_back(a);
    if (g != "full" && have_full) pos_delta.series.push_back(d);
  }

  // Per-run CSV and JSON: the numbers exactly as read or derived.
  std::string csv_runs = "run,regime,seed";
  for (const auto& c : kTrainColumns) csv_runs += str_cat(",train_", c.key);
  for (const auto& c : kEvalColumns) csv_runs += str_cat(",eval_", c.key);
  csv_runs += ",nonfinite_steps,train_time_s,time_to_full_loss_s,time_to_full_loss_ratio\n";
  std::string csv_curve = "run,regime,seed,step,train_time_s,val_loss\n";
  for (const auto& r : runs) {
    csv_runs += str_cat(csv_field(r.name), ",", csv_field(r.regime), ",", r.seed);
    for (const auto& c : kTrainColumns) csv_runs += "," + full_precision(value_of(r, c));
    for (const auto& c : kEvalColumns) csv_runs += "," + full_precision(value_of(r, c));
    csv_runs += str_cat(",", r.nonfinite_steps.size(), ",", full_precision(train_seconds(r)), ",",
                        full_precision(time_to_full_loss(r)), ",",
                        full_precision(time_to_full_loss_ratio(r)), "\n");
    json curve = json::array();
    for (const LossAtTime& p : r.curve) {
      curve.push_back({{"step", p.step}, {"train_seconds", p.seconds}, {"val_loss", p.loss}});
      csv_curve += str_cat(csv_field(r.name), ",", csv_field(r.regime), ",", r.seed, ",", p.step, ",",
                           full_precision(p.seconds), ",", full_precision(p.loss), "\n");
    }
    json jr = {{"run", r.name},
               {"regime", r.regime},
               {"seed", r.seed},
               {"train", r.train},
               {"eval", r.eval},
               {"nonfinite_steps", r.nonfinite_steps},
               {"time",
                {{"train_seconds", train_seconds(r)},
                 {"time_to_full_loss_s", time_to_full_loss(r)},
                 {"time_to_full_loss_ratio", time_to_full_loss_ratio(r)},
                 {"val_loss_curve", curve}}}};
    out["runs"].push_back(jr);
  }

  // Figures. Series are means over seeds at each logged step.
  auto series_of = [&](const std::string& key) {
    std::vector<SvgSeries> ss;
    for (const auto& g : regimes) {
      std::map<int, std::vector<double>> by_step;
      for (const RunData* r : runs_of(g))
        for (const auto& j : r->lines)
          if (j.contains(key) && j[key].is_number()) by_step[j["step"].get<int>()].push_back(j[key].get<double>());
      SvgSeries s;
      s.name = g;
      for (auto& [step, v] : by_step) {
        s.x.push_back(step);
        s.y.push_back(mean_interval(v).mean);
      }
      ss.push_back(std::move(s));
    }
    return ss;
  };
  const int max_step = int(runs[0].train.at("steps"));
  std::vector<std::pair<std::string, std::string>> figures;  // (file, caption)
  std::map<std::string, std::string> svgs;  // figure file -> SVG text
  std::string bucket_md, bucket_html;      // the window-bucket table
  auto add_figure = [&](const std::string& file, const std::string& caption, std::string svg) {
    figures.push_back({file, caption});
    svgs[file] = std::move(svg);
  };
  const std::string seeds_note = runs.size() > regimes.size() ? " (mean over seeds)" : "";
  if (!timing.is_null() && have_full)
    add_figure("tradeoff_time.svg",
               "Headline: Δ validation loss vs full (paired over seeds, 95% CI) against the training step time ratio "
               "measured side by side (timing.json); below 0 is better than full, left of 1 is cheaper",
               svg_line_chart(by_time));
  if (have_full)
    add_figure("tradeoff_work.svg",
               "Δ validation loss vs full (paired over seeds, 95% CI) against the attention work ratio (multiply-adds "
               "executed / full, mean over training)",
               svg_line_chart(by_work));
  if (!pos_starts.empty()) {
    add_figure("loss_by_position.svg", "Validation loss by position of the predicted token in the context" + seeds_note,
               svg_line_chart(pos_chart));
    if (have_full && !pos_delta.series.empty())
      add_figure("loss_by_position_delta.svg",
                 "Δ validation loss vs full by position (paired over seeds, 95% CI): where a long-range loss happens",
                 svg_line_chart(pos_delta));
  }
  add_figure("val_loss.svg", "Validation loss over training" + seeds_note,
             svg_line_chart({"Validation loss" + seeds_note, "optimizer step", "validation loss (nats/token)",
                             series_of("val_loss")}));
  {
    // Validation loss against training seconds: at each evaluation step, the mean over seeds of both.
    SvgLineChart c{"Validation loss against training time" + seeds_note,
                   "training wall-clock seconds (evaluation excluded)",
                   "validation loss (nats/token)",
                   {}};
    for (const auto& g : regimes) {
      std::map<int, std::pair<std::vector<double>, std::vector<double>>> by_step;
      for (const RunData* r : runs_of(g))
        for (const LossAtTime& p : r->curve)
          by_step[p.step].first.push_back(p.seconds), by_step[p.step].second.push_back(p.loss);
      SvgSeries sr;
      sr.name = g;
      for (auto& [step, v] : by_step) {
        const MeanInterval t = mean_interval(v.first), l = mean_interval(v.second);
        if (t.n == 0 || l.n == 0) continue;  // no usable time
        sr.x.push_back(t.mean), sr.y.push_back(l.mean);
      }
      c.series.push_back(std::move(sr));
    }
    std::vector<double> full_final;
    for (const RunData* f : runs_of("full")) full_final.push_back(f->train.at("val_loss"));
    if (have_full) c.ref_y = mean_interval(full_final).mean;
    add_figure("val_loss_time.svg",
               "Validation loss against training wall-clock seconds" + seeds_note +
                   ": at each evaluation, the seconds of training before it, from the logs' tokens / (tokens/s), so "
                   "evaluation time is excluded (metrics.jsonl's elapsed_s would include the earlier evaluations)" +
                   (have_full ? "; dashed: full's final validation loss" : ""),
               svg_line_chart(c));
  }
  add_figure("val_loss_late.svg", "Validation loss, second half of training (zoom)",
             svg_line_chart({"Validation loss, late training (zoom)", "optimizer step", "validation loss (nats/token)",
                             series_of("val_loss"), max_step / 2.0}));
  add_figure("acr.svg", "Attention coverage ratio (ACR) of the windows in force",
             svg_line_chart({"ACR of the windows in force", "optimizer step", "ACR (mean W/T, 1 = full attention)",
                             series_of("attn_ratio")}));
  add_figure("levels_used.svg", "Hierarchy levels used at the control updates",
             svg_line_chart({"Hierarchy levels used", "optimizer step", "levels used (mean over layers)",
                             series_of("levels_used")}));
  // Window-bucket heatmap: regime x window, % of (layer, head, sequence) executions at evaluation.
  {
    std::vector<int> windows;  // every candidate window, and any other a run used
    for (const auto& r : runs)
      for (int w : r.cc.windows)
        if (std::find(windows.begin(), windows.end(), w) == windows.end()) windows.push_back(w);
    for (const auto& r : runs)
      for (auto& [w, f] : r.eval["window_fractions"].items()) {
        const int wi = std::atoi(w.c_str());
        if (std::find(windows.begin(), windows.end(), wi) == windows.end()) windows.push_back(wi);
      }
    std::sort(windows.begin(), windows.end());
    SvgHeatmap h;
    h.title = "Window buckets at evaluation";
    h.x_label = "window W (tokens)";
    h.y_label = "regime";
    h.scale_label = "% of executions";
    h.lo = 0, h.hi = 100;
    for (int w : windows) h.cols.push_back(std::to_string(w));
    Table bucket_t;
    bucket_t.header = {"regime"};
    for (int w : windows) bucket_t.header.push_back("W=" + std::to_string(w));
    for (const auto& g : regimes) {
      h.rows.push_back(g);
      std::vector<std::string> row = {g};
      for (int w : windows) {
        std::vector<double> v;
        for (const RunData* r : runs_of(g)) v.push_back(100.0 * r->eval["window_fractions"].value(std::to_string(w), 0.0));
        const double m = mean_interval(v).mean;
        h.values.push_back(m);
        h.cell_text.push_back(fixed(m, 1) + "%");
        row.push_back(fixed(m, 1) + "%");
      }
      bucket_t.rows.push_back(row);
    }
    add_figure("window_buckets.svg", "Window-bucket frequencies at evaluation (regime x window)", svg_heatmap(h));
    out["window_buckets"] = {{"windows", windows}, {"table", bucket_t.rows}};
    bucket_md = markdown(bucket_t);
    bucket_html = html_table(bucket_t);
  }
  for (const auto& g : regimes) {
    const RunData& r = *runs_of(g)[0];
    const json& map = r.eval["window_map"];
    SvgHeatmap h;
    h.title = str_cat("Final windows: ", g, " (seed ", r.seed, ")");
    h.x_label = "head";
    h.y_label = "layer";
    h.scale_label = "W / T";
    const int T = r.cfg.train.context;
    for (size_t l = 0; l < map.size(); l++) {  // shape and types checked by report_check_eval
      h.rows.push_back(std::to_string(l));
      if (l == 0)
        for (size_t k = 0; k < map[l].size(); k++) h.cols.push_back(std::to_string(k));
      for (const auto& w : map[l]) {
        h.values.push_back(double(w.get<int>()) / T);
        h.cell_text.push_back(std::to_string(w.get<int>()));
      }
    }
    h.lo = 0, h.hi = 1;
    add_figure("window_map_" + safe_name(g) + ".svg", str_cat("Final layer x head windows, ", g), svg_heatmap(h));
  }

  // Files.
  make_dirs(dir + "/figures");
  for (const auto& [file, caption] : figures) write_file_atomic(dir + "/figures/" + file, svgs[file]);
  const RunData& r0 = runs[0];
  const ModelConfig& m = r0.cfg.model;
  const std::string setup = str_cat(
      "Preset `", suite.value("preset", std::string("?")), "`: ", suite.value("summary", std::string("")), ". Model: ",
      m.num_hidden_layers, " layers, ", m.num_attention_heads, " heads x ", m.head_dim, " (", m.num_key_value_heads,
      " KV heads), width ", m.hidden_size, ", vocabulary ", m.vocab_size, ". Training: ", r0.cfg.train.steps,
      " steps of ", r0.cfg.train.batch_size, " x ", r0.cfg.train.context, " tokens. Runs: ", runs.size(),
      unfinished.empty() ? std::string() : str_cat(" finished (unfinished: ", unfinished.size(), ")"), ".",
      matched_note(suite), base_note(dir, runs));
  const std::string notes =
      "Definitions. Training table: val loss at the final step; ACR (mean W/T over layers and heads) and exact pair "
      "ratio (executed causal pairs / full causal pairs) of the windows in force at the final step; attention work "
      "ratio = multiply-adds the attention kernels executed / the same kernels with full windows, mean over the "
      "run; peak MB = peak resident memory of the training process. Inference table (`aah eval`): inference ACR = "
      "sum over windows of f_W * W / T, f_W the fraction of (layer, head, sequence) executions with window W; peak "
      "memory of the evaluation process. With two or more seeds, a cell reads mean ± half-width of the 95% "
      "t-interval; Δ is the mean paired difference regime - full over the seeds both have. The logs' tokens/s "
      "(training: median over logged intervals after the first; evaluation: after the first, warmup, batch) are in "
      "runs.csv, summary.csv and report.json, not in the tables: the runs of a suite train one after another on a "
      "machine that may be doing other things, so they compare poorly; the time side by side is the comparison.";
  bool several_seeds = false;
  for (const auto& g : regimes) several_seeds |= runs_of(g).size() >= 2;
  const std::string seeds_line = str_cat(
      differences_note(several_seeds), "Time ratios come from timing.json: each regime's final "
      "window map timed side by side with full windows, interleaved in one process (`aah bench maps`); a ratio whose "
      "spread (IQR / median) is over ",
      timing.is_null() ? std::string("10%") : fixed(100 * timing.value("spread_limit", 0.1), 0) + "%",
      " is flagged '!' and is not a result.");
  std::string timing_note;
  if (!timing.is_null())
    timing_note = str_cat("Measured on ", timing.value("cpu", std::string("?")), ", ", timing.value("threads", 0),
                          " threads, ", timing.value("rounds", 0), " interleaved rounds; ms are medians. The "
                          "controller's own cost is not included (measured 0.1-0.2% of a step by `aah bench train "
                          "--regime`). These interleaved times, not the logs' tokens/s, compare the regimes' speed.\n");
  std::string md = "# aah suite report\n\n" + setup + "\n\n";
  if (!summary_md.empty()) md += "## Summary: what survives\n\n" + seeds_line + "\n\n" + summary_md + "\n";
  if (!time_t.rows.empty()) md += "## Time side by side\n\n" + markdown(time_t) + "\n" + timing_note + "\n";
  md += "## Time to loss\n\n" + markdown(ttl_t) + "\n" + (ttl_md.empty() ? "" : ttl_md + "\n") + ttl_note + "\n\n";
  if (!retr.table.rows.empty())
    md += "## Retrieval accuracy by DEF-ASK distance\n\n" + markdown(retr.table) + "\n" + retr.kept_md + "\n" + retr.note +
          "\n\n";
  if (!far.table.rows.empty())
    md += "## Far copies by distance (real text)\n\n" + markdown(far.table) + "\n" +
          (far.delta.rows.empty() ? "" : markdown(far.delta) + "\n") + far_note + "\n\n";
  if (!heads_t.rows.empty()) md += "## Heads that matter, and the windows they got\n\n" + markdown(heads_t) + "\n" + heads_note + "\n\n";
  md += "## Training (the paper's Table 4)\n\n" + markdown(shown(train_t)) +
        "\n## Inference (the paper's Table 6)\n\n" + markdown(shown(eval_t));
  if (!diff_t.rows.empty()) md += "\n## Paired difference from full attention\n\n" + markdown(shown(diff_t));
  md += "\n## Window buckets at evaluation\n\n" + bucket_md + "\n## Figures\n\n";
  for (const auto& [file, caption] : figures) md += str_cat("![", caption, "](figures/", file, ")\n\n");
  md += notes + "\n";
  std::string html = html_head() + "<h1>aah suite report</h1>\n" + html_paragraph(setup);
  if (!summary_md.empty())
    html += "<h2>Summary: what survives</h2>\n" + html_paragraph(seeds_line) + html_list(summary_md);
  if (!time_t.rows.empty())
    html += "<h2>Time side by side</h2>\n" + html_table(time_t) + html_paragraph(timing_note);
  html += "<h2>Time to loss</h2>\n" + html_table(ttl_t);
  if (!ttl_md.empty()) html += html_list(ttl_md);
  html += html_paragraph(ttl_note);
  if (!retr.table.rows.empty())
    html += "<h2>Retrieval accuracy by DEF-ASK distance</h2>\n" + html_table(retr.table) + html_list(retr.kept_md) +
            html_paragraph(retr.note);
  if (!far.table.rows.empty())
    html += "<h2>Far copies by distance (real text)</h2>\n" + html_table(far.table) +
            (far.delta.rows.empty() ? "" : html_table(far.delta)) + html_paragraph(far_note);
  if (!heads_t.rows.empty())
    html += "<h2>Heads that matter, and the windows they got</h2>\n" + html_table(heads_t) + html_paragraph(heads_note);
  html += "<h2>Training (the paper's Table 4)</h2>\n" + html_table(shown(train_t)) +
          "<h2>Inference (the paper's Table 6)</h2>\n" + html_table(shown(eval_t));
  if (!diff_t.rows.empty()) html += "<h2>Paired difference from full attention</h2>\n" + html_table(shown(diff_t));
  html += "<h2>Window buckets at evaluation</h2>\n" + bucket_html + "<h2>Figures</h2>\n";
  for (const auto& [file, caption] : figures)
    html += "<figure>\n" + svgs[file] + "<figcaption>" + svg_escape(caption) + "</figcaption>\n</figure>\n";
  html += html_paragraph(notes) + "</body>\n</html>\n";
  out["tables"] = {{"training", {{"header", train_t.header}, {"rows", train_t.rows}}},
                   {"inference", {{"header", eval_t.header}, {"rows", eval_t.rows}}},
                   {"paired", {{"header", diff_t.header}, {"rows", diff_t.rows}}},
                   {"time_to_loss", {{"header", ttl_t.header}, {"rows", ttl_t.rows}}}};
  out["time_to_loss"] = ttl_json;
  out["headline"] = headline;
  if (!timing.is_null()) out["timing"] = timing;
  if (!retr.regimes.empty()) out["retrieval"] = retr.regimes;
  if (!far.regimes.empty()) out["far_copy"] = far.regimes;
  if (!heads_json.empty()) out["heads"] = heads_json;
  // Replace only what an earlier report wrote: each file, if there, must look like this one (report_owns_file).
  const std::string json_text = out.dump(2) + "\n";
  std::vector<std::pair<std::string, const std::string*>> files = {
      {"report.md", &md},           {"report.html", &html},           {"runs.csv", &csv_runs},
      {"summary.csv", &csv_summary}, {"val_loss_time.csv", &csv_curve}, {"report.json", &json_text}};
  if (!pos_starts.empty()) files.push_back({"loss_by_position.csv", &csv_pos});
  for (const auto& [name, text] : files)
    if (file_exists(dir + "/" + name) && !report_owns_file(read_file(dir + "/" + name), *text))
      fail("[report] ", dir, "/", name, " was not written by aah report and would be replaced: move it, or write the ",
           "suite elsewhere");
  for (const auto& [name, text] : files) write_file_atomic(dir + "/" + name, *text);
  std::printf("%s\n", md.substr(0, md.find("\n## Window buckets")).c_str());
  std::fflush(stdout);  // the tables before the message below, also when both go to one file
  std::fprintf(stderr,
               "[report] wrote %s/report.md, report.html, runs.csv, summary.csv, val_loss_time.csv, report.json, "
               "figures/ (%zu)\n",
               dir.c_str(), figures.size());
}

}  // namespace aah
