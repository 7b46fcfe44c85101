#include "experiments/report_content.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "experiments/report_stats.h"

namespace aah::report {

const Column kTrainColumns[] = {{"val_loss", "val loss", 4, false},
                                {"acr", "ACR", 4, false},
                                {"pair_ratio", "pair ratio", 4, false},
                                {"work_ratio", "attn work ratio", 4, false},
                                {"tokens_per_s", "tokens/s during training", 0, false},
                                {"peak_mb", "peak MB", 0, false}};
const Column kEvalColumns[] = {{"val_loss", "val loss", 4, true},
                               {"val_ppl", "perplexity", 3, true},
                               {"inference_acr", "inference ACR", 4, true},
                               {"pair_ratio", "pair ratio", 4, true},
                               {"attn_work_ratio", "attn work ratio", 4, true},
                               {"tokens_per_s", "tokens/s during eval", 0, true},
                               {"peak_rss_mb", "peak MB", 0, true}};

double value_of(const RunData& r, const Column& c) {
  return c.eval ? r.eval[c.key].get<double>() : r.train.at(c.key);
}

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

// The tables' columns of the logs' throughput ("during training", "during eval"): measured while the runs of a
// suite ran one after another on a machine that may have been busy, so their intervals are mostly noise
// (39,755 ± 23,041). report.json, runs.csv and summary.csv keep them; the side-by-side timing is the result.
const char* const kLoggedThroughput[] = {"tokens/s during training", "tokens/s during eval", "Δ inference tokens/s"};

Table shown(const Table& t) {
  std::vector<size_t> keep;
  for (size_t i = 0; i < t.header.size(); i++)
    if (std::find(std::begin(kLoggedThroughput), std::end(kLoggedThroughput), t.header[i]) ==
        std::end(kLoggedThroughput))
      keep.push_back(i);
  Table o;
  for (size_t i : keep) o.header.push_back(t.header[i]);
  for (const auto& row : t.rows) {
    o.rows.emplace_back();
    for (size_t i : keep) o.rows.back().push_back(i < row.size() ? row[i] : std::string());
  }
  return o;
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

json interval_json(const MeanInterval& m) {
  return {{"n", m.n}, {"mean", m.mean}, {"lo95", m.lo}, {"hi95", m.hi}};
}
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
// A paired difference in words: an interval that excludes 0 is a difference, else "no difference detected" with the
// equivalence bound the data support. One seed gives no interval, and no claim.
std::string verdict(const MeanInterval& d, int decimals, const char* unit) {
  if (d.n == 0) return "no seed paired with full: no claim";
  if (d.n < 2) return str_cat(fixed(d.mean, decimals), unit, " (one seed: no claim)");
  // The equivalence bound is said beside a difference too: how far from full the data let it be.
  const std::string ci = str_cat("95% CI [", fixed(d.lo, decimals), ", ", fixed(d.hi, decimals),
                                 "], equivalent within ±", fixed(equivalence_bound90(d), decimals), unit);
  if (d.lo > 0) return str_cat("higher by ", fixed(d.mean, decimals), unit, " (", ci, ")");
  if (d.hi < 0) return str_cat("lower by ", fixed(-d.mean, decimals), unit, " (", ci, ")");
  return str_cat("no difference detected (", d.mean >= 0 ? "+" : "", fixed(d.mean, decimals), unit, ", ", ci, ")");
}

ReportContent report_content(SuiteRuns& s) {
  ReportContent c;
  // Time side by side (timing.json): the time-to-loss curves in interleaved time when every regime is timed.
  const bool interleaved_time = use_interleaved_time(s.runs, s.timing);
  add_regime_tables(s, c);
  add_time_side_by_side(s, c);
  add_time_to_loss(s, c);
  c.ttl_note = time_to_loss_text(interleaved_time);
  // Retrieval accuracy by DEF-ASK distance (synth data), with the seeds that kept retrieval at the farthest distance.
  c.retrieval = retrieval_section(s.runs, s.regimes);
  c.summary_md += c.retrieval.summary;  // empty without full
  c.summary_rows.insert(c.summary_rows.end(), c.retrieval.csv.begin(), c.retrieval.csv.end());
  // Far copies by distance (any corpus), against a frequency-matched control, paired with full by seed.
  c.far = far_copy_section(s.runs, s.regimes);
  c.summary_md += c.far.summary;
  for (const RunData& r : s.runs) c.summary_md += nonfinite_note(r);  // diverged runs are results too, and marked
  c.summary_rows.insert(c.summary_rows.end(), c.far.csv.begin(), c.far.csv.end());
  c.far_note = far_copy_text();
  c.heads = heads_section(s);
  c.summary_md += c.heads.summary;
  add_loss_by_position(s, c);
  add_figures(s, c);
  c.setup = setup_text(s);
  c.definitions = definitions_text();
  c.seeds_line = seeds_text(s);
  c.timing_note = timing_text(s.timing);
  return c;
}

}  // namespace aah::report
