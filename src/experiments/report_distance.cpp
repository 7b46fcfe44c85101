// The report's sections by distance: retrieval accuracy by DEF-ASK distance (synth data) and far copies by
// distance (any corpus), each per regime and distance bucket, paired with full by seed.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "eval/far_copy.h"
#include "eval/retrieval.h"
#include "experiments/report_content.h"
#include "experiments/report_stats.h"

namespace aah::report {

namespace {

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
    jr["buckets"].push_back({{"lo", lo},
                             {"hi", b.second},
                             {"accuracy", interval_json(m)},
                             {"delta_vs_full", with_equivalence(interval_json(d), d)}});
    deltas.push_back({bucket_label(b), d});
    s.csv.push_back({g, "retrieval", "accuracy_" + bucket_label(b), m.n, m.mean, m.lo, m.hi});
  }
  const bool only_full_kept = g != "full" && !full.empty();
  const KeptCount kept = retrieval_kept(rs, only_full_kept ? full : std::vector<const RunData*>(), far.first);
  const Proportion& p = kept.kept;
  jr["kept"] = kept_json(kept, far, only_full_kept);
  s.csv.push_back({g, "retrieval", "kept", p.n, p.n ? double(p.k) / p.n : NAN, p.lo, p.hi});
  s.kept_md += kept_sentence(g, kept);
  s.table.rows.push_back(row);
  s.regimes.push_back(jr);
  if (only_full_kept)
    s.summary += str_cat("- **", g, "** retrieval accuracy vs full: ", retrieval_verdict(deltas), ".\n");
}

}  // namespace

RetrievalSection retrieval_section(const std::vector<RunData>& runs, const std::vector<std::string>& regimes) {
  RetrievalSection s;
  const std::vector<DistanceBucket> buckets = distance_buckets(runs);
  if (buckets.empty()) return s;
  const DistanceBucket far =
      *std::max_element(buckets.begin(), buckets.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  s.table.header = {"regime"};
  for (const DistanceBucket& b : buckets) s.table.header.push_back("accuracy " + bucket_label(b));
  for (const auto& g : regimes) retrieval_add_regime(s, g, runs, buckets, far);
  const bool have_full = std::find(regimes.begin(), regimes.end(), "full") != regimes.end();
  s.note = str_cat(
      "Kept: a run keeps retrieval when its accuracy at the farthest distance (", bucket_label(far), ") is at least ",
      fixed(kRetrievalKept, 2),
      ". That is all or nothing per seed, so it is counted: k of n seeds, with the exact "
      "binomial (Clopper-Pearson) 95% interval for k / n, which stays within [0, 1]. ",
      have_full ? "Only the seeds whose full-attention run itself kept retrieval there count for the other regimes "
                  "(a regime cannot keep what full never had); full's count is over all its seeds. "
                : "No full run: every seed counts. ",
      "Accuracy cells: mean over seeds ± half-width of the 95% t-interval.");
  return s;
}

FarCopySection far_copy_section(const std::vector<RunData>& runs, const std::vector<std::string>& regimes) {
  FarCopySection s;
  std::vector<DistanceBucket> buckets;  // (lo, hi) of the first run that has far_copy
  for (const auto& r : runs)
    if (r.eval.contains("far_copy") && buckets.empty())
      for (const auto& b : r.eval["far_copy"]["buckets"])
        buckets.push_back({b["lo"].get<int>(), b.value("hi", json())});
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
      const auto [copy, dcopy] =
          paired_over_seeds(rs, full, [lo](const RunData& r) { return far_copy_value(r, lo, "loss"); });
      const auto [ctrl, dctrl] =
          paired_over_seeds(rs, full, [lo](const RunData& r) { return far_copy_value(r, lo, "control_loss"); });
      const auto [ex, dex] = paired_over_seeds(rs, full, [lo](const RunData& r) {
        return far_copy_value(r, lo, "loss") - far_copy_value(r, lo, "control_loss");
      });
      row.push_back(str_cat(cell(copy, 3), " / ", cell(ctrl, 3)));
      drow.push_back(dex.n ? str_cat(dex.mean >= 0 ? "+" : "", cell(dex, 3)) : "–");
      jr["buckets"].push_back({{"lo", lo},
                               {"hi", b.second},
                               {"loss", interval_json(copy)},
                               {"control_loss", interval_json(ctrl)},
                               {"delta_loss_vs_full", with_equivalence(interval_json(dcopy), dcopy)},
                               {"delta_control_vs_full", with_equivalence(interval_json(dctrl), dctrl)},
                               {"excess_vs_full", with_equivalence(interval_json(dex), dex)}});
      s.csv.push_back({g, "far_copy", "loss_" + bucket_label(b), copy.n, copy.mean, copy.lo, copy.hi});
      if (g == "full") continue;
      s.csv.push_back({g, "far_copy", "excess_vs_full_" + bucket_label(b), dex.n, dex.mean, dex.lo, dex.hi});
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
    const std::string v = paired == 0  ? "no seed paired with full: no claim"
                          : paired < 2 ? "one seed: no claim"
                          : !differs.empty()
                              ? "beyond the frequency-matched control, " + differs
                              : str_cat(
                                    "no difference detected beyond the frequency-matched control in any distance "
                                    "bucket (equivalent within ±",
                                    fixed(bound, 3), " nats in every bucket)");
    s.summary += str_cat("- **", g, "** far copies (real text) vs full: ", v, ".\n");
  }
  return s;
}

}  // namespace aah::report
