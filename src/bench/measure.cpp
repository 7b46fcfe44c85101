#include "bench/measure.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "core/sys.h"

namespace aah {

namespace {

// Quantile q of sorted x by linear interpolation between the closest ranks (R's type 7, numpy's default).
double quantile_sorted(const std::vector<double>& x, double q) {
  const double pos = q * double(x.size() - 1);
  const size_t lo = size_t(pos);
  const size_t hi = std::min(lo + 1, x.size() - 1);
  return x[lo] + (pos - double(lo)) * (x[hi] - x[lo]);
}

}  // namespace

SampleStats sample_stats(std::vector<double> samples, double spread_limit) {
  SampleStats s;
  s.n = int(samples.size());
  s.samples = samples;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.min = samples.front();
  s.max = samples.back();
  s.median = quantile_sorted(samples, 0.5);
  s.q25 = quantile_sorted(samples, 0.25);
  s.q75 = quantile_sorted(samples, 0.75);
  const double iqr = s.q75 - s.q25;
  s.spread = iqr == 0 ? 0 : s.median == 0 ? std::numeric_limits<double>::infinity() : iqr / std::fabs(s.median);
  s.flagged = s.n < 3 || !(s.spread <= spread_limit);
  return s;
}

SampleStats ratio_stats(const std::vector<double>& num, const std::vector<double>& den, double spread_limit) {
  if (num.size() != den.size()) fail("[measure] ratio of ", num.size(), " samples to ", den.size());
  std::vector<double> r(num.size());
  for (size_t i = 0; i < r.size(); i++) r[i] = num[i] / den[i];
  return sample_stats(std::move(r), spread_limit);
}

SampleStats ratio_stats(const MeasureResult& r, int i, int j) {
  return ratio_stats(r.cases.at(size_t(i)).samples, r.cases.at(size_t(j)).samples, r.spread_limit);
}

SampleStats rate_stats(const SampleStats& seconds, double work, double spread_limit) {
  std::vector<double> r(seconds.samples.size());
  for (size_t i = 0; i < r.size(); i++) r[i] = work / seconds.samples[i];
  return sample_stats(std::move(r), spread_limit);
}

SampleStats scaled(SampleStats s, double scale) {
  for (double* v : {&s.median, &s.min, &s.max, &s.q25, &s.q75}) *v *= scale;
  for (double& v : s.samples) v *= scale;
  return s;
}

std::vector<double> per_round_sum(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) fail("[measure] sum of ", a.size(), " samples and ", b.size());
  std::vector<double> s(a.size());
  for (size_t i = 0; i < s.size(); i++) s[i] = a[i] + b[i];
  return s;
}

MeasureResult measure_interleaved(const std::vector<MeasureCase>& cases, const MeasureOptions& opts) {
  if (cases.empty()) fail("[measure] no case to measure");
  for (const auto& [i, j] : opts.ratios)
    if (i < 0 || j < 0 || size_t(i) >= cases.size() || size_t(j) >= cases.size())
      fail("[measure] ratio (", i, ", ", j, ") of ", cases.size(), " cases");
  const int rounds_min = std::max(1, opts.rounds_min), rounds_max = std::max(rounds_min, opts.rounds_max);
  MeasureResult r;
  r.spread_limit = opts.spread;
  r.warmup_rounds = std::max(0, opts.warmup_rounds);
  for (const auto& c : cases) r.names.push_back(c.name);
  r.cases.resize(cases.size());

  r.runs_per_sample.assign(cases.size(), 1);
  auto run_round = [&](bool timed, bool calibrate) {
    for (size_t c = 0; c < cases.size(); c++) {
      double t = 0;
      for (int i = 0; i < r.runs_per_sample[c]; i++) {
        if (cases[c].prepare) cases[c].prepare();
        const double t0 = now_seconds();
        cases[c].run();
        t += now_seconds() - t0;
      }
      t /= r.runs_per_sample[c];
      if (calibrate && opts.min_sample_s > 0 && t > 0)
        r.runs_per_sample[c] = (int)std::clamp(std::ceil(opts.min_sample_s / t), 1.0, 1e6);
      if (timed) r.cases[c].samples.push_back(t);
    }
  };
  // The budget counts the warm-up too: a comparison takes at most budget_s in all (once rounds_min ran).
  const double start = now_seconds();
  for (int w = 0; w < r.warmup_rounds; w++) run_round(false, w == r.warmup_rounds - 1);
  const double timed_start = now_seconds();
  while (true) {
    run_round(true, false);
    r.rounds++;
    r.seconds = now_seconds() - start;
    // The spreads so far: every case, and the ratios asked for.
    double worst = 0;
    bool settled = true;
    auto consider = [&](const SampleStats& s) {
      worst = std::max(worst, s.spread);
      settled = settled && !s.flagged;
    };
    for (const auto& c : r.cases) consider(sample_stats(c.samples, opts.spread));
    for (const auto& [i, j] : opts.ratios) consider(ratio_stats(r.cases[i].samples, r.cases[j].samples, opts.spread));
    if (opts.progress)
      std::fprintf(opts.progress, "[measure] round %d (%d-%d), %.1f s: worst spread %.1f%%\n", r.rounds, rounds_min,
                   rounds_max, r.seconds, 100 * worst);
    if (r.rounds < rounds_min) continue;
    if (settled) {
      r.settled = true;
      break;
    }
    if (r.rounds >= rounds_max) break;
    const double per_round = (now_seconds() - timed_start) / r.rounds;
    if (r.seconds + per_round > opts.budget_s) break;
  }
  for (auto& c : r.cases) c = sample_stats(c.samples, opts.spread);
  return r;
}

nlohmann::json stats_json(const SampleStats& s, bool samples) {
  nlohmann::json j = {{"median", s.median}, {"min", s.min},         {"max", s.max},
                      {"spread", s.spread}, {"n", s.n},             {"flagged", s.flagged}};
  if (!std::isfinite(s.spread)) j["spread"] = nullptr;
  if (samples) j["samples"] = s.samples;
  return j;
}

std::string stats_text(const SampleStats& s, int digits) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.*f (min %.*f, spread %.1f%%)%s", digits, s.median, digits, s.min, 100 * s.spread,
                flag_mark(s));
  return buf;
}

const char* flag_mark(const SampleStats& s) { return s.flagged ? "!" : ""; }

void print_flag_note(double spread_limit) {
  std::printf("! spread > %.0f%%: not a result (spread = interquartile range / median over the rounds; fewer than 3 "
              "rounds count as flagged too). Rerun on a quieter machine or with a larger --budget.\n",
              100 * spread_limit);
}

}  // namespace aah
