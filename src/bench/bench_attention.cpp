// `aah bench attention`: does attention time follow the windows? Times forward and backward of the tiled kernel
// (path "tiled") and of the dense-masked path (path "dense", T x T scores plus mask, as the paper's PyTorch run)
// for B = 1, H = 8 heads, D in {32, 64, 128}, T in {1024, 4096} (and T = 16384 for D = 64, tiled path only: the
// dense path's 8 x T x T scores would take 8.6 GB), three window sets per T:
//   full      every head W = T (plain causal)
//   T/8       every head W = T/8
//   adaptive  [T/8, T/8, T/8, T/8, T/4, T/4, T/2, T] (the paper's Full-adaptive mix, rounded to 8 heads)
// Columns: ms (median over the rounds of measure.h: all configurations of a (T, D), forward and backward, and an
// sgemm (1024^3, row-major) run interleaved, round after round), its spread (IQR / median), pair_ratio = visible
// pairs / visible pairs of "full", time_ratio = time / time of "full" (same T, D, path, pass, precision) per round,
// then its median, gflops and its share of the sgemm (per round), and for the tiled path its speedup over the dense
// path (per round). '!' marks a figure whose spread is over the limit (--spread): not a result. mac/p (tiled): the
// multiply-adds the kernel executes (AttnCounters, boundary tiles' partial blocks included) relative to full's, over
// the pair ratio: the t/p that the executed work alone predicts; t/p above it is per-tile overhead.
// FLOP counting (useful work, visible causal pairs only, whatever the path executes): forward 4 D per pair
// (QK^T and PV), backward 8 D per pair (dP = dO V^T, dV, dK, dQ; the recomputation of QK^T, 2 D more, is not
// counted), fwd+bwd 12 D per pair.
// The dense path at T = 4096 runs all window sets for D = 64 only (its cost does not depend on the windows);
// for D = 32 and 128 it runs the full set.
// precisions with "bf16" (--precision fp32,bf16; fp32 is always timed, the reference): the tiled path again through
// the backend local-bf16 (backend_for("local", "bf16"): its attention_forward / attention_backward, whatever kernel
// that backend holds), every window set, plus oneDNN's bf16 product (bf16::gemm_nt, 1024^3) as its reference rate,
// all in the same rounds as the fp32 cases. A bf16 row's time ratio and t/p are against bf16's own full windows, its
// share is of the bf16 product's rate, and its speedup over fp32 = fp32 time / bf16 time of the same (T, D, windows,
// pass), per round. The dense path stays fp32.
#include "bench/bench_attention.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_train.h"
#include "core/check.h"
#include "core/rng.h"
#include "core/sys.h"
#include "kernels/backend.h"
#include "kernels/bf16/bf16.h"

namespace aah {
namespace {

struct AttnBenchRow {
  int T, D;
  std::string window_set, path, pass;
  std::string precision = "fp32";  // bf16: the backend local-bf16 (time ratio and t/p against bf16's full windows)
  std::vector<int> windows;
  uint64_t pairs;
  double pair_ratio, gflops, sgemm_gflops;
  double macs_over_pair_ratio = 0;  // tiled: multiply-adds executed / full's, over the pair ratio (0: not counted)
  SampleStats ms, time_ratio, pct_sgemm, speedup_vs_dense;  // speedup: n = 0 when not measured
  // bf16 rows: oneDNN's bf16 product rate and this row's share of it (instead of the sgemm's), the fp32 row's ms and
  // the speedup over it, fp32 time / bf16 time per round (n = 0 on fp32 rows).
  double bf16_gemm_gflops = 0, fp32_ms = 0;
  SampleStats pct_bf16_gemm, speedup_vs_fp32;
  int calls_per_sample = 1;  // forward (or backward) calls per sample (MeasureOptions::min_sample_s), fwd+bwd: max
  bool flagged() const {
    return ms.flagged || (window_set != "full" && time_ratio.flagged) ||
           (speedup_vs_dense.n > 0 && speedup_vs_dense.flagged) || (speedup_vs_fp32.n > 0 && speedup_vs_fp32.flagged);
  }
};

// The rows the kernel goal (t/p <= 1.10 for windows >= 64) speaks of: tiled, not full, every window >= 64.
bool attn_goal_row(const AttnBenchRow& r) {
  return r.path == "tiled" && r.window_set != "full" && *std::min_element(r.windows.begin(), r.windows.end()) >= 64;
}

constexpr int kAttnB = 1, kAttnH = 8;  // batch and heads of every configuration

// The window sets timed at (T, D), (name, per-head windows): full, T/8 and adaptive (the built-in ones), then one
// per --window at or under T (one over T is said once, at the first D).
using WindowSets = std::vector<std::pair<std::string, std::vector<int>>>;
WindowSets attention_window_sets(int T, int D, int first_D, const std::vector<int>& windows) {
  const int H = kAttnH;
  WindowSets sets = {{"full", std::vector<int>(H, T)},
                     {"T/8", std::vector<int>(H, T / 8)},
                     {"adaptive", {T / 8, T / 8, T / 8, T / 8, T / 4, T / 4, T / 2, T}}};
  for (int w : windows) {
    if (w <= T)
      sets.push_back({"W=" + std::to_string(w), std::vector<int>(H, w)});
    else if (D == first_D)
      std::fprintf(stderr, "[attention] T=%d: --window %d is over T, not timed there\n", T, w);
  }
  return sets;
}
constexpr int kBuiltinWindowSets = 3;  // full, T/8, adaptive: the dense path runs these only

// The inputs (random, seeded by T and D) and gradient buffers of the (T, D) configurations, (B, H, T, D) each.
struct AttnInputs {
  std::vector<float> q, k, v, dout, dq, dk, dv;
  AttnInputs(int T, int D) {
    const size_t nq = size_t(kAttnB) * kAttnH * T * D;
    Rng rng(uint64_t(T) * 131 + D);
    auto randn = [&](size_t n) {
      std::vector<float> x(n);
      for (auto& e : x) e = float(rng.normal());
      return x;
    };
    q = randn(nq), k = randn(nq), v = randn(nq), dout = randn(nq);
    dq.resize(nq), dk.resize(nq), dv.resize(nq);
  }
};

// One timed (path, window set, precision): path 0 tiled, 1 dense; bf16: the tiled path of the backend local-bf16;
// its forward output and log-sum-exp, which the backward reads.
struct AttnRun {
  int path, set;
  bool bf16;
  const Backend<float>* be;
  std::vector<float> out, lse;
  uint64_t macs[2] = {0, 0};  // fwd, bwd multiply-adds executed (AttnCounters, one untimed call each)
};

// The runs at (T, D): the tiled path for every set; the dense path for the built-in sets where its scores fit, at
// T = 4096 for D = 64 only beyond full (its cost does not depend on the windows), and only with `dense`; with a
// bf16 backend (local-bf16), its tiled path again for every set.
std::vector<AttnRun> attention_runs(int T, int D, int n_sets, bool dense, const Backend<float>* bf16_be) {
  const size_t nq = size_t(kAttnB) * kAttnH * T * D, nl = size_t(kAttnB) * kAttnH * T;
  std::vector<AttnRun> runs;
  for (int path = 0; path < 2; path++)
    for (int si = 0; si < n_sets; si++) {
      if (path == 1 && (si >= kBuiltinWindowSets || (T >= 4096 && si > 0 && D != 64))) continue;  // window-independent
      if (path == 1 && (T > 4096 || !dense)) continue;  // dense scores would not fit
      const Backend<float>* be = &backend_named(path == 0 ? "local" : "dense");
      runs.push_back({path, si, false, be, std::vector<float>(nq), std::vector<float>(nl)});
    }
  if (bf16_be)
    for (int si = 0; si < n_sets; si++)
      runs.push_back({0, si, true, bf16_be, std::vector<float>(nq), std::vector<float>(nl)});
  return runs;
}

// The index of the run with this path, set and precision (there is one when the caller asks), or -1.
int find_run(const std::vector<AttnRun>& runs, int path, int set, bool bf16) {
  for (size_t i = 0; i < runs.size(); i++)
    if (runs[i].path == path && runs[i].set == set && runs[i].bf16 == bf16) return int(i);
  return -1;
}

// One forward case and one backward case per run (cases 2 r and 2 r + 1; the backward reads the forward's
// output), all interleaved round by round (measure.h); the time ratios against full windows (and a bf16 run's
// against its fp32 run) are the results, so `mo` waits for them to settle too. Counts the multiply-adds the tiled
// kernel executes (boundary tiles' waste included) with one untimed call each (0 where a backend does not count).
std::vector<MeasureCase> attention_cases(std::vector<AttnRun>& runs, const WindowSets& sets, AttnInputs& in, int T,
                                         int D, MeasureOptions& mo) {
  const int B = kAttnB, H = kAttnH;
  std::vector<MeasureCase> cases;
  for (size_t ri = 0; ri < runs.size(); ri++) {
    AttnRun* r = &runs[ri];
    const int* win = sets[r->set].second.data();
    const Backend<float>* be = r->be;
    if (r->path == 0) {  // the work the tiled kernel executes, boundary tiles' waste included
      AttnCounters cf, cb;
      be->attention_forward(r->out.data(), r->lse.data(), in.q.data(), in.k.data(), in.v.data(), win, B, H, H, T, D,
                            nullptr, &cf);
      be->attention_backward(in.dq.data(), in.dk.data(), in.dv.data(), in.dout.data(), r->out.data(), r->lse.data(),
                             in.q.data(), in.k.data(), in.v.data(), win, B, H, H, T, D, &cb);
      r->macs[0] = cf.macs, r->macs[1] = cb.macs;
    }
    const std::string name =
        std::string(r->path == 0 ? "tiled " : "dense ") + sets[r->set].first + (r->bf16 ? " bf16" : "");
    AttnInputs* x = &in;
    cases.push_back({name + " fwd", [x, r, win, be, T, D] {
                       be->attention_forward(r->out.data(), r->lse.data(), x->q.data(), x->k.data(), x->v.data(), win,
                                             B, H, H, T, D, nullptr, nullptr);
                     }});
    cases.push_back({name + " bwd", [x, r, win, be, T, D] {
                       be->attention_backward(x->dq.data(), x->dk.data(), x->dv.data(), x->dout.data(), r->out.data(),
                                              r->lse.data(), x->q.data(), x->k.data(), x->v.data(), win, B, H, H, T, D,
                                              nullptr);
                     }});
    const int fi = find_run(runs, r->path, 0, r->bf16);  // full windows, same path and precision
    if (fi >= 0 && fi != int(ri))
      for (int p = 0; p < 2; p++) mo.ratios.push_back({int(2 * ri) + p, 2 * fi + p});
    const int ri32 = r->bf16 ? find_run(runs, 0, r->set, false) : -1;  // the fp32 run beside a bf16 run
    if (ri32 >= 0)
      for (int p = 0; p < 2; p++) mo.ratios.push_back({2 * ri32 + p, int(2 * ri) + p});
  }
  return cases;
}

// The rows of the runs at (T, D) from their measurement (case i_sgemm: the sgemm; i_bf16_gemm: oneDNN's bf16
// product, -1 without bf16 runs), three passes a run: fwd, bwd and fwd+bwd (per round, the sum).
void attention_rows(std::vector<AttnBenchRow>& rows, const std::vector<AttnRun>& runs, const WindowSets& sets,
                    const MeasureResult& res, int i_sgemm, const SgemmBench& sgemm, int i_bf16_gemm,
                    const Bf16GemmBench& bf16_gemm, int T, int D) {
  const int B = kAttnB, H = kAttnH;
  const double lim = res.spread_limit;
  const double sgemm_gflops = rate_stats(res.cases[i_sgemm], sgemm.flops(), lim).median / 1e9;
  const double bf16_gemm_gflops =
      i_bf16_gemm >= 0 ? rate_stats(res.cases[i_bf16_gemm], bf16_gemm.flops(), lim).median / 1e9 : 0;
  // Per-round seconds of run ri in pass p (0 fwd, 1 bwd, 2 fwd+bwd).
  auto secs = [&](size_t ri, int p) {
    if (p < 2) return res.cases[2 * ri + p].samples;
    return per_round_sum(res.cases[2 * ri].samples, res.cases[2 * ri + 1].samples);
  };
  const uint64_t full_pairs = uint64_t(B) * H * attn_visible_pairs(T, T);
  const char* passes[3] = {"fwd", "bwd", "fwd+bwd"};
  const double flops_per_pair_d[3] = {4.0, 8.0, 12.0};
  for (size_t ri = 0; ri < runs.size(); ri++) {
    const AttnRun& r = runs[ri];
    const auto& [name, win] = sets[r.set];
    uint64_t pairs = 0;
    for (int w : win) pairs += uint64_t(B) * attn_visible_pairs(T, w);
    const size_t full_ri = size_t(find_run(runs, r.path, 0, r.bf16));
    const int dense_ri = r.path == 0 && !r.bf16 ? find_run(runs, 1, r.set, false) : -1;
    const int fp32_ri = r.bf16 ? find_run(runs, 0, r.set, false) : -1;
    for (int p = 0; p < 3; p++) {
      const std::vector<double> t = secs(ri, p);
      const double flops = flops_per_pair_d[p] * double(pairs) * D;
      AttnBenchRow row;
      row.T = T, row.D = D, row.window_set = name, row.path = r.path == 0 ? "tiled" : "dense";
      row.pass = passes[p];
      row.precision = r.bf16 ? "bf16" : "fp32";
      row.windows = win;
      row.pairs = pairs;
      row.pair_ratio = double(pairs) / full_pairs;
      row.ms = scaled(sample_stats(t, lim), 1e3);
      const auto& reps = res.runs_per_sample;
      row.calls_per_sample = p < 2 ? reps[2 * ri + p] : std::max(reps[2 * ri], reps[2 * ri + 1]);
      row.time_ratio = ratio_stats(t, secs(full_ri, p), lim);
      if (r.path == 0) {
        const auto& f = runs[full_ri].macs;
        const double mine = p < 2 ? double(r.macs[p]) : double(r.macs[0] + r.macs[1]);
        const double full = p < 2 ? double(f[p]) : double(f[0] + f[1]);
        row.macs_over_pair_ratio = mine / full / row.pair_ratio;
      }
      row.gflops = flops / (row.ms.median / 1e3) / 1e9;
      row.sgemm_gflops = sgemm_gflops;
      // share of the sgemm's rate, per round: (flops / t) / (sgemm flops / t_sgemm); bf16 rows: pct_bf16_gemm
      row.pct_sgemm = scaled(ratio_stats(res.cases[i_sgemm].samples, t, lim), 100 * flops / sgemm.flops());
      if (dense_ri >= 0) row.speedup_vs_dense = ratio_stats(secs(size_t(dense_ri), p), t, lim);
      if (fp32_ri >= 0) {
        const std::vector<double> t32 = secs(size_t(fp32_ri), p);
        row.fp32_ms = scaled(sample_stats(t32, lim), 1e3).median;
        row.speedup_vs_fp32 = ratio_stats(t32, t, lim);  // fp32 time / bf16 time, per round
        row.bf16_gemm_gflops = bf16_gemm_gflops;
        row.pct_bf16_gemm =
            scaled(ratio_stats(res.cases[i_bf16_gemm].samples, t, lim), 100 * flops / bf16_gemm.flops());
      }
      rows.push_back(row);
    }
  }
}

// Times every (path, window set, precision) at (T, D), with the sgemm (and with bf16_be, oneDNN's bf16 product),
// and appends their rows.
void attention_measure(std::vector<AttnBenchRow>& rows, const BenchOptions& o, const SgemmBench& sgemm,
                       const Bf16GemmBench& bf16_gemm, int T, int D, int first_D, bool dense,
                       const std::vector<int>& windows, const Backend<float>* bf16_be) {
  const WindowSets sets = attention_window_sets(T, D, first_D, windows);
  AttnInputs in(T, D);
  std::vector<AttnRun> runs = attention_runs(T, D, int(sets.size()), dense, bf16_be);
  MeasureOptions mo = o.measure;
  std::vector<MeasureCase> cases = attention_cases(runs, sets, in, T, D, mo);
  cases.push_back(sgemm.make_case());
  const int i_sgemm = int(cases.size()) - 1;
  int i_bf16_gemm = -1;
  if (bf16_be) cases.push_back(bf16_gemm.make_case()), i_bf16_gemm = int(cases.size()) - 1;
  if (!o.json) std::fprintf(stderr, "[attention] T=%d D=%d: %zu cases\n", T, D, cases.size());
  const MeasureResult res = measure_interleaved(cases, mo);
  attention_rows(rows, runs, sets, res, i_sgemm, sgemm, i_bf16_gemm, bf16_gemm, T, D);
}

// One JSON object a row.
void attention_print_json(const std::vector<AttnBenchRow>& rows, bool ss) {
  for (const auto& r : rows) {
    nlohmann::json j = {{"bench", "attention"},
                        {"B", kAttnB},
                        {"H", kAttnH},
                        {"T", r.T},
                        {"D", r.D},
                        {"window_set", r.window_set},
                        {"windows", r.windows},
                        {"path", r.path},
                        {"pass", r.pass},
                        {"precision", r.precision},
                        {"ms", r.ms.median},
                        {"pairs", r.pairs},
                        {"pair_ratio", r.pair_ratio},
                        {"time_ratio", r.time_ratio.median},
                        {"time_over_pair_ratio", r.time_ratio.median / r.pair_ratio},
                        {"macs_over_pair_ratio",
                         r.macs_over_pair_ratio > 0 ? nlohmann::json(r.macs_over_pair_ratio) : nlohmann::json(nullptr)},
                        {"gflops", r.gflops},
                        {"sgemm_gflops", r.sgemm_gflops},
                        {"pct_sgemm", r.pct_sgemm.median},
                        {"rounds", r.ms.n},
                        {"calls_per_sample", r.calls_per_sample},
                        {"threads", num_threads()}};
    j["speedup_vs_dense"] =
        r.speedup_vs_dense.n > 0 ? nlohmann::json(r.speedup_vs_dense.median) : nlohmann::json(nullptr);
    j["stats"] = {{"ms", stats_json(r.ms, ss)},
                  {"time_ratio", stats_json(r.time_ratio, ss)},
                  {"time_over_pair_ratio", stats_json(scaled(r.time_ratio, 1 / r.pair_ratio), ss)},
                  {"pct_sgemm", stats_json(r.pct_sgemm, ss)}};
    if (r.speedup_vs_dense.n > 0) j["stats"]["speedup_vs_dense"] = stats_json(r.speedup_vs_dense, ss);
    if (r.speedup_vs_fp32.n > 0) {  // bf16: its reference rate is the bf16 product's, not the sgemm's
      j["pct_sgemm"] = nullptr;
      j["stats"].erase("pct_sgemm");
      j["isa"] = bf16::isa();
      j["attention_kernel"] = bf16::attn_kernel_name(bf16::attn_kernel(r.D));
      j["bf16_gemm_gflops"] = r.bf16_gemm_gflops;
      j["pct_bf16_gemm"] = r.pct_bf16_gemm.median;
      j["fp32_ms"] = r.fp32_ms;
      j["speedup_vs_fp32"] = r.speedup_vs_fp32.median;
      j["stats"]["pct_bf16_gemm"] = stats_json(r.pct_bf16_gemm, ss);
      j["stats"]["speedup_vs_fp32"] = stats_json(r.speedup_vs_fp32, ss);
    }
    j["flagged"] = r.flagged();
    std::printf("%s\n", j.dump().c_str());
  }
}

// The table, a line a row, then per (T, D) its rounds, calls per sample and sgemm rate; true when a row is flagged.
bool attention_print_table(const std::vector<AttnBenchRow>& rows, const BenchOptions& o) {
  std::printf("%5s %4s %-9s %-6s %-8s %10s %6s %7s %7s %6s %6s %8s %7s %8s\n", "T", "D", "windows", "path", "pass",
              "ms", "spread", "pairs", "time", "t/p", "mac/p", "GFLOP/s", "%sgemm", "vs dense");
  bool any_flag = false;
  for (const auto& r : rows) {
    char vs[24] = "";
    if (r.speedup_vs_dense.n > 0)
      std::snprintf(vs, sizeof vs, "%.2fx%s", r.speedup_vs_dense.median, flag_mark(r.speedup_vs_dense));
    const bool ratio_flag = r.window_set != "full" && r.time_ratio.flagged;
    char macs[16] = "";
    if (r.macs_over_pair_ratio > 0) std::snprintf(macs, sizeof macs, "%.3f", r.macs_over_pair_ratio);
    std::printf("%5d %4d %-9s %-6s %-8s %9.2f%1s %5.1f%% %7.4f %7.4f %6.3f%1s %6s %8.1f %6.1f%% %8s\n", r.T, r.D,
                r.window_set.c_str(), r.path.c_str(), r.pass.c_str(), r.ms.median, flag_mark(r.ms),
                100 * r.ms.spread, r.pair_ratio, r.time_ratio.median, r.time_ratio.median / r.pair_ratio,
                ratio_flag ? "!" : "", macs, r.gflops, r.pct_sgemm.median, vs);
    any_flag = any_flag || r.flagged();
  }
  std::printf("per (T, D): rounds, calls per sample (fewest-most; --min-sample %g s), sgemm 1024^3 GFLOP/s in "
              "this process:",
              o.measure.min_sample_s);
  for (size_t i = 0; i < rows.size(); i++)
    if (i == 0 || rows[i].T != rows[i - 1].T || rows[i].D != rows[i - 1].D) {
      int lo = rows[i].calls_per_sample, hi = lo;
      for (size_t j = i; j < rows.size() && rows[j].T == rows[i].T && rows[j].D == rows[i].D; j++)
        lo = std::min(lo, rows[j].calls_per_sample), hi = std::max(hi, rows[j].calls_per_sample);
      std::printf("  %d/%d: %d, %d-%d, %.1f", rows[i].T, rows[i].D, rows[i].ms.n, lo, hi, rows[i].sgemm_gflops);
    }
  std::printf("\n");
  return any_flag;
}

// --precision bf16: a line per bf16 row (tiled path, backend local-bf16), its fp32 row's time beside it and the
// speedup over it per round, then per (T, D) the bf16 product's rate; true when a row is flagged.
bool attention_print_bf16_table(const std::vector<AttnBenchRow>& rows) {
  std::printf(
      "\nbf16 (backend local-bf16, tiled path; oneDNN %s; attention kernel %s where D is a multiple of 32, else "
      "fp32), timed in the same rounds as fp32. time, t/p: against bf16's full windows;\n%%bf16: share of oneDNN's "
      "bf16 product; vs fp32: fp32 time / bf16 time per round (> 1: bf16 faster), median and spread\n",
      bf16::isa().c_str(), bf16::attn_kernel_name(bf16::attn_kernel(32)));
  std::printf("%5s %4s %-9s %-6s %-8s %10s %6s %7s %7s %6s %6s %8s %7s %9s %9s %6s\n", "T", "D", "windows", "path",
              "pass", "ms", "spread", "pairs", "time", "t/p", "mac/p", "GFLOP/s", "%bf16", "fp32 ms", "vs fp32",
              "spread");
  bool any_flag = false;
  for (const auto& r : rows) {
    const bool ratio_flag = r.window_set != "full" && r.time_ratio.flagged;
    char macs[16] = "";
    if (r.macs_over_pair_ratio > 0) std::snprintf(macs, sizeof macs, "%.3f", r.macs_over_pair_ratio);
    std::printf(
        "%5d %4d %-9s %-6s %-8s %9.2f%1s %5.1f%% %7.4f %7.4f %6.3f%1s %6s %8.1f %6.1f%% %9.2f %7.3fx%1s %5.1f%%\n", r.T,
        r.D, r.window_set.c_str(), r.path.c_str(), r.pass.c_str(), r.ms.median, flag_mark(r.ms), 100 * r.ms.spread,
        r.pair_ratio, r.time_ratio.median, r.time_ratio.median / r.pair_ratio, ratio_flag ? "!" : "", macs, r.gflops,
        r.pct_bf16_gemm.median, r.fp32_ms, r.speedup_vs_fp32.median, flag_mark(r.speedup_vs_fp32),
        100 * r.speedup_vs_fp32.spread);
    any_flag = any_flag || r.flagged();
  }
  std::printf("per (T, D): bf16 product 1024^3 GFLOP/s in this process:");
  for (size_t i = 0; i < rows.size(); i++)
    if (i == 0 || rows[i].T != rows[i - 1].T || rows[i].D != rows[i - 1].D)
      std::printf("  %d/%d: %.1f", rows[i].T, rows[i].D, rows[i].bf16_gemm_gflops);
  std::printf("\n");
  return any_flag;
}

// Goals at T = 4096 (tiled path): time ratio <= 1.10 x pair ratio; full fwd+bwd >= 70% of sgemm; >= 4x dense.
// True when a share of the sgemm is flagged.
bool attention_print_goals_4096(const std::vector<AttnBenchRow>& rows, const std::vector<int>& Ts,
                                const std::vector<int>& Ds) {
  std::printf("\nT=4096 goals (tiled): time_ratio/pair_ratio <= 1.10, full fwd+bwd >= 70%% sgemm, >= 4x dense\n");
  bool any_flag = false;
  for (int D : Ds) {
    if (std::find(Ts.begin(), Ts.end(), 4096) == Ts.end()) break;
    double worst = 0, pct = 0, speed = 0;
    bool worst_flag = false, pct_flag = false, speed_flag = false;
    for (const auto& r : rows) {
      if (r.T != 4096 || r.D != D || r.path != "tiled") continue;
      if (attn_goal_row(r) && r.pass != "fwd+bwd" && r.time_ratio.median / r.pair_ratio > worst)
        worst = r.time_ratio.median / r.pair_ratio, worst_flag = r.time_ratio.flagged;
      if (r.window_set == "full" && r.pass == "fwd+bwd")
        pct = r.pct_sgemm.median, speed = r.speedup_vs_dense.median, pct_flag = r.pct_sgemm.flagged,
        speed_flag = r.speedup_vs_dense.n > 0 && r.speedup_vs_dense.flagged;
    }
    char vs_dense[48] = "dense path not run";
    if (speed > 0) std::snprintf(vs_dense, sizeof vs_dense, "%.2fx%s the dense path", speed, speed_flag ? "!" : "");
    std::printf("  D=%-3d worst time/pair ratio %.3f%s   full fwd+bwd %.1f%%%s of sgemm   %s\n", D, worst,
                worst_flag ? "!" : "", pct, pct_flag ? "!" : "", vs_dense);
    any_flag = any_flag || pct_flag;
  }
  return any_flag;
}

// Boundary tiles: the worst time/pair ratio of any window set whose windows are all >= 64, per T (goal <= 1.10),
// with its mac/p: the t/p the executed multiply-adds alone predict, a floor no speed per multiply-add goes under.
void attention_print_boundary_goal(const std::vector<AttnBenchRow>& rows, const std::vector<int>& Ts) {
  std::vector<std::string> counted;  // the window sets that count, in the order timed
  for (const auto& r : rows)
    if (attn_goal_row(r) && std::find(counted.begin(), counted.end(), r.window_set) == counted.end())
      counted.push_back(r.window_set);
  std::string goal_sets;
  for (const auto& name : counted) goal_sets += (goal_sets.empty() ? " " : ", ") + name;
  std::printf("Every T (tiled), window sets with every window >= 64 (timed:%s): worst time/pair ratio (fwd, bwd, "
              "fwd+bwd; goal <= 1.10), and its floor mac/p\n",
              goal_sets.c_str());
  for (int T : Ts) {
    const AttnBenchRow* worst = nullptr;
    for (const auto& r : rows) {
      if (r.T != T || !attn_goal_row(r)) continue;
      if (!worst || r.time_ratio.median / r.pair_ratio > worst->time_ratio.median / worst->pair_ratio) worst = &r;
    }
    if (worst)
      std::printf("  T=%-5d %.3f%s (D=%d %s %s; mac/p %.3f)\n", T, worst->time_ratio.median / worst->pair_ratio,
                  flag_mark(worst->time_ratio), worst->D, worst->window_set.c_str(), worst->pass.c_str(),
                  worst->macs_over_pair_ratio);
  }
}

}  // namespace

int bench_attention(const BenchOptions& o, const std::vector<int>& contexts, const std::vector<int>& head_dims,
                    bool dense, const std::vector<int>& windows, const std::vector<std::string>& precisions) {
  bool with_bf16 = false;
  for (const std::string& p : precisions) {
    if (p != "fp32" && p != "bf16")
      fail("bench attention: --precision: unknown precision '", p, "' (expected fp32, bf16 or fp32,bf16)");
    with_bf16 = with_bf16 || p == "bf16";
  }
  // Before anything is timed: a CPU without bf16 matrix instructions is refused here (backend_for says why).
  const Backend<float>* bf16_be = with_bf16 ? &backend_for("local", "bf16") : nullptr;
  const std::vector<int> Ts = contexts.empty() ? std::vector<int>{1024, 4096, 16384} : contexts;
  const std::vector<int> Ds = head_dims.empty() ? std::vector<int>{32, 64, 128} : head_dims;
  const SgemmBench sgemm;
  const Bf16GemmBench bf16_gemm;
  std::vector<AttnBenchRow> rows;
  if (!o.json)
    std::printf("attention bench: B=%d H=%d, %d thread%s%s\n", kAttnB, kAttnH, num_threads(),
                num_threads() == 1 ? "" : "s", with_bf16 ? ", precisions fp32 and bf16 (tiled path)" : "");
  for (int T : Ts)
    for (int D : Ds) {
      if (T > 4096 && D != 64 && head_dims.empty()) continue;
      attention_measure(rows, o, sgemm, bf16_gemm, T, D, Ds.front(), dense, windows, bf16_be);
    }

  if (o.json) {
    attention_print_json(rows, o.samples);
    return 0;
  }
  // The fp32 table and goals as without bf16; the bf16 rows in their own table after it.
  std::vector<AttnBenchRow> rows32, rows16;
  for (const auto& r : rows) (r.precision == "bf16" ? rows16 : rows32).push_back(r);
  bool any_flag = attention_print_table(rows32, o);
  if (with_bf16) any_flag = attention_print_bf16_table(rows16) || any_flag;
  any_flag = attention_print_goals_4096(rows32, Ts, Ds) || any_flag;
  attention_print_boundary_goal(rows32, Ts);
  if (windows.empty())
    std::printf("Smaller windows (the goal covers every W >= 64): --window 64,128,256 adds sets with every head "
                "at W.\n");
  std::printf("FLOPs counted: fwd 4*pairs*D, bwd 8*pairs*D (visible causal pairs only). Dense at T=4096: all window"
              " sets for D=64, full only for D=32/128; none at T=16384 (tiled D=64 only).\n");
  if (any_flag) print_flag_note(o.measure.spread);
  return 0;
}

}  // namespace aah
