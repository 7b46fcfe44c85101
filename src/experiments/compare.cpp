#include "experiments/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <tuple>

#include "core/check.h"
#include "experiments/report_read.h"
#include "model/config.h"

namespace aah {

using json = nlohmann::json;

namespace {

// config.json as "section.key" -> value text (nested objects flattened; arrays and scalars kept as JSON text).
void flatten(const json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    return;
  }
  out[prefix] = j.dump();
}

// A value that is a path inside the suite directory `dir` (as given or made absolute), with that directory written
// as <suite>: paths inside a suite (train.init_from is its base run) differ between two suites by their directory
// alone, which is not a difference in the experiment. `v` is JSON text; other values are returned as they are.
std::string within_suite(const std::string& v, std::string dir) {
  const json j = json::parse(v, nullptr, false);
  if (!j.is_string()) return v;
  const std::string path = j.get<std::string>();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(dir, ec).lexically_normal().string();
  for (const std::string& prefix : {dir, absolute})
    if (!prefix.empty() && path.rfind(prefix + "/", 0) == 0)  // inside it (a value equal to its name is a value)
      return json("<suite>" + path.substr(prefix.size())).dump();
  return v;
}

std::string signed_text(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.*f", decimals, v);
  return buf;
}
std::string fixed_text(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

double mean_of(const std::vector<double>& x) { return mean_interval(x).mean; }

std::string verdict(const CompareRow& r) {
  if (r.diff.n < 2) return "one seed: no claim";
  if (r.diff.lo > 0) return "B higher";
  if (r.diff.hi < 0) return "B lower";
  return str_cat("no difference detected (equivalent within +-", fixed_text(r.bound, 4), ")");
}

}  // namespace

Comparison compare_suites(const std::string& a_dir, const std::string& b_dir, const std::string& metric) {
  const report::SuiteRuns A = report::read_suite(a_dir), B = report::read_suite(b_dir);
  // a suite against itself pairs every run with itself: every difference 0, which says nothing (a mistyped name)
  if (std::filesystem::equivalent(a_dir, b_dir))
    fail("[compare] ", a_dir, " and ", b_dir, " are the same suite directory: compare two suites");
  Comparison c;
  c.a_dir = a_dir, c.b_dir = b_dir, c.metric = metric;
  std::map<std::string, const report::RunData*> in_b;
  for (const auto& r : B.runs) in_b[r.name] = &r;
  std::map<std::string, std::pair<int, std::string>> differs;  // key -> (pairs where it differs, first "A -> B")
  int pairs = 0;
  auto value = [&](const report::RunData& r, const std::string& dir) {
    return report::number(r.eval, metric.c_str(), str_cat(dir, "/runs/", r.name, "/eval.json"));
  };
  for (const std::string& regime : A.regimes) {
    CompareRow row;
    row.regime = regime;
    for (const auto& ra : A.runs) {
      if (ra.regime != regime) continue;
      const auto it = in_b.find(ra.name);
      if (it == in_b.end()) {
        c.only_a.push_back(ra.name);
        continue;
      }
      const report::RunData& rb = *it->second;
      row.seeds.push_back(ra.seed);
      row.a.push_back(value(ra, a_dir));
      row.b.push_back(value(rb, b_dir));
      pairs++;
      std::map<std::string, std::string> fa, fb;
      flatten(config_to_json(ra.cfg), "", fa);
      flatten(config_to_json(rb.cfg), "", fb);
      for (const auto& [key, va] : fa) {
        const auto jb = fb.find(key);
        const std::string vb = jb == fb.end() ? "(absent)" : jb->second;
        if (within_suite(va, a_dir) == within_suite(vb, b_dir)) continue;
        auto& d = differs[key];
        if (d.first++ == 0) d.second = str_cat(va, " -> ", vb);
      }
    }
    if (row.seeds.empty()) continue;
    // runs are read in name order ("full-s10" before "full-s2"): list them in seed order
    std::vector<std::tuple<int, double, double>> by_seed;
    for (size_t i = 0; i < row.seeds.size(); i++) by_seed.emplace_back(row.seeds[i], row.a[i], row.b[i]);
    std::sort(by_seed.begin(), by_seed.end());
    for (size_t i = 0; i < by_seed.size(); i++) std::tie(row.seeds[i], row.a[i], row.b[i]) = by_seed[i];
    std::vector<double> d;
    for (size_t i = 0; i < row.a.size(); i++) {
      d.push_back(row.b[i] - row.a[i]);
      row.b_lower += row.b[i] < row.a[i];
    }
    row.diff = mean_interval(d);
    row.diff90 = interval90(row.diff);
    row.bound = equivalence_bound90(row.diff);
    c.rows.push_back(row);
  }
  for (const auto& rb : B.runs)
    if (std::none_of(A.runs.begin(), A.runs.end(), [&](const report::RunData& ra) { return ra.name == rb.name; }))
      c.only_b.push_back(rb.name);
  if (c.rows.empty())
    fail("[compare] ", a_dir, " and ", b_dir, ": no run of one has a partner (the same regime and seed) in the other");
  for (const auto& [key, d] : differs)
    c.differences.push_back(str_cat(
        key, ": ", d.second, d.first == pairs ? std::string() : str_cat(" (in ", d.first, " of ", pairs, " pairs)")));
  return c;
}

std::string compare_text(const Comparison& c) {
  std::string s = str_cat("A = ", c.a_dir, ", B = ", c.b_dir, ": ", c.metric,
                          " (eval.json) of the runs paired by regime and seed; differences are B - A\n");
  s += "config.json of paired runs differs in: ";
  if (c.differences.empty()) s += "nothing (the same settings: a rerun)\n";
  for (size_t i = 0; i < c.differences.size(); i++)
    s += (i ? "; " : "") + c.differences[i] + (i + 1 == c.differences.size() ? "\n" : "");
  char line[512];
  std::snprintf(line, sizeof line, "%-28s %3s %10s %10s %10s %22s %22s %9s  %s\n", "regime", "n", "A mean", "B mean",
                "B - A", "95% interval", "90% interval", "B lower", "verdict (95%)");
  s += line;
  for (const CompareRow& r : c.rows) {
    auto interval = [&](double lo, double hi) {
      return r.diff.n >= 2 ? str_cat("[", signed_text(lo, 4), ", ", signed_text(hi, 4), "]") : std::string("-");
    };
    const std::string i95 = interval(r.diff.lo, r.diff.hi), i90 = interval(r.diff90.lo, r.diff90.hi);
    std::snprintf(line, sizeof line, "%-28s %3d %10.4f %10.4f %10s %22s %22s %9s  %s\n", r.regime.c_str(), r.diff.n,
                  mean_of(r.a), mean_of(r.b), signed_text(r.diff.mean, 4).c_str(), i95.c_str(), i90.c_str(),
                  str_cat(r.b_lower, " of ", r.diff.n).c_str(), verdict(r).c_str());
    s += line;
  }
  auto unpaired = [&](const char* side, const std::vector<std::string>& names) {
    if (names.empty()) return;
    s += str_cat("only in ", side, " (not compared): ");
    for (size_t i = 0; i < names.size(); i++) s += (i ? ", " : "") + names[i];
    s += "\n";
  };
  unpaired("A", c.only_a);
  unpaired("B", c.only_b);
  s += "Equivalent within +-b: the 90% interval of the mean difference lies inside [-b, b] (two one-sided tests at "
       "5%); with one seed there is no interval.\n";
  return s;
}

json compare_json(const Comparison& c) {
  json rows = json::array();
  for (const CompareRow& r : c.rows) {
    const bool two = r.diff.n >= 2;
    auto num = [&](double v) { return two && std::isfinite(v) ? json(v) : json(nullptr); };
    rows.push_back({{"regime", r.regime},
                    {"n", r.diff.n},
                    {"seeds", r.seeds},
                    {"a", r.a},
                    {"b", r.b},
                    {"a_mean", mean_of(r.a)},
                    {"b_mean", mean_of(r.b)},
                    {"diff_mean", r.diff.mean},
                    {"diff_lo95", num(r.diff.lo)},
                    {"diff_hi95", num(r.diff.hi)},
                    {"diff_lo90", num(r.diff90.lo)},
                    {"diff_hi90", num(r.diff90.hi)},
                    {"equivalence_bound90", num(r.bound)},
                    {"b_lower", r.b_lower},
                    {"verdict", verdict(r)}});
  }
  return {{"a", c.a_dir},       {"b", c.b_dir},       {"metric", c.metric}, {"differences", c.differences},
          {"only_a", c.only_a}, {"only_b", c.only_b}, {"rows", rows}};
}

}  // namespace aah
