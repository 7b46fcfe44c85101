// The report's statistics over runs: a number's mean over a regime's seeds and its difference from full paired by
// seed, time to loss, retrieval kept / far-copy numbers per run. The generic statistics (t intervals, equivalence
// bounds, Clopper-Pearson) are in stats.h.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "experiments/report_read.h"
#include "experiments/stats.h"

namespace aah {

// The first time `curve` reaches `target` (loss <= target): interpolated linearly between the evaluation before and
// the first at or below the target; the first evaluation's time when it is already there; NaN when never reached.
double report_time_to_loss(const std::vector<LossAtTime>& curve, double target);
// The loss of `curve` at `seconds` of training: interpolated linearly between the evaluations around it (an
// evaluation's own loss at its time); NaN before the first evaluation or past the last.
double report_loss_at_time(const std::vector<LossAtTime>& curve, double seconds);

namespace report {

// Median of the training tokens/s after the first logged interval (warmup), or the first when there is one.
double median_after_warmup(std::vector<double> v);

// The runs of regime g, in run order.
std::vector<const RunData*> regime_runs(const std::vector<RunData>& runs, const std::string& g);
// The run of `seed` among rs, or null.
const RunData* seed_run(const std::vector<const RunData*>& rs, int seed);

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

// Time to loss in interleaved time (issue 40): when timing.json times every regime of the report, a run's training
// seconds at step s are s x its regime's median step time there (measured side by side in one process, so a busy
// machine during one run does not move them), x 1 / (1 - the run's mean measuring share) for the policies that
// measure attention as they train (coverage_time_share in metrics.jsonl; timing.json times the windows, not the
// measuring). Returns false, and leaves the logged seconds, when some regime is not timed.
bool use_interleaved_time(std::vector<RunData>& runs, const json& timing);

// Time to loss against full: the training seconds at which a run's validation curve first reaches the final
// validation loss of full's run of the same seed (NaN: not reached, or no such full run), and its ratio to full's
// own time to it. `runs` are all the suite's runs (full's among them).
double train_seconds(const RunData& r);
const RunData* full_run_of(const std::vector<RunData>& runs, const RunData& r);
double time_to_full_loss(const std::vector<RunData>& runs, const RunData& r);
double time_to_full_loss_ratio(const std::vector<RunData>& runs, const RunData& r);
// At equal time: the run's final validation loss minus full's (same seed) after as many training seconds.
double delta_at_equal_time(const std::vector<RunData>& runs, const RunData& r);

// A run's retrieval accuracy in the bucket starting at lo; NaN without a retrieval evaluation or a question there.
double retrieval_accuracy(const RunData& r, int lo);

struct KeptCount {
  Proportion kept;         // k of n seeds kept retrieval, with the Clopper-Pearson 95% interval
  std::vector<int> seeds;  // the n seeds counted
};
// The runs rs that kept retrieval in the bucket at lo, counted over the seeds whose full run (`full`, same seed)
// kept it there; over all of rs when `full` is empty (full itself, or a suite without full).
KeptCount retrieval_kept(const std::vector<const RunData*>& rs, const std::vector<const RunData*>& full, int lo);

// A run's far-copy number in the bucket starting at lo ("loss" or "control_loss"); NaN where missing.
double far_copy_value(const RunData& r, int lo, const char* key);

}  // namespace report
}  // namespace aah
