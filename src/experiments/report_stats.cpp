#include "experiments/report_stats.h"

#include <algorithm>
#include <cmath>

#include "eval/retrieval.h"

namespace aah {

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

namespace report {

double median_after_warmup(std::vector<double> v) {
  if (v.size() > 1) v.erase(v.begin());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::vector<const RunData*> regime_runs(const std::vector<RunData>& runs, const std::string& g) {
  std::vector<const RunData*> v;
  for (const auto& r : runs)
    if (r.regime == g) v.push_back(&r);
  return v;
}

const RunData* seed_run(const std::vector<const RunData*>& rs, int seed) {
  for (const RunData* r : rs)
    if (r->seed == seed) return r;
  return nullptr;
}

bool use_interleaved_time(std::vector<RunData>& runs, const json& timing) {
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

double train_seconds(const RunData& r) {
  return r.curve.back().seconds;
}

const RunData* full_run_of(const std::vector<RunData>& runs, const RunData& r) {
  return seed_run(regime_runs(runs, "full"), r.seed);
}

double time_to_full_loss(const std::vector<RunData>& runs, const RunData& r) {
  const RunData* f = full_run_of(runs, r);
  return f ? report_time_to_loss(r.curve, f->train.at("val_loss")) : NAN;
}

double time_to_full_loss_ratio(const std::vector<RunData>& runs, const RunData& r) {
  const RunData* f = full_run_of(runs, r);
  return f ? time_to_full_loss(runs, r) / time_to_full_loss(runs, *f) : NAN;
}

double delta_at_equal_time(const std::vector<RunData>& runs, const RunData& r) {
  const RunData* f = full_run_of(runs, r);
  return f ? r.train.at("val_loss") - report_loss_at_time(f->curve, train_seconds(r)) : NAN;
}

double retrieval_accuracy(const RunData& r, int lo) {
  if (!r.eval.contains("retrieval")) return NAN;
  for (const auto& b : r.eval["retrieval"]["buckets"])
    if (b["lo"].get<int>() == lo && b["accuracy"].is_number()) return b["accuracy"].get<double>();
  return NAN;
}

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

double far_copy_value(const RunData& r, int lo, const char* key) {
  if (!r.eval.contains("far_copy")) return NAN;
  for (const auto& b : r.eval["far_copy"]["buckets"])
    if (b["lo"].get<int>() == lo && b[key].is_number()) return b[key].get<double>();
  return NAN;
}

}  // namespace report
}  // namespace aah
