// `aah bench attention`: does attention time follow the windows? Times forward and backward of the tiled kernel
// (path "tiled") and of the dense-masked path (path "dense", T x T scores plus mask, as the paper's PyTorch run)
// for B = 1, H = 8 heads, D in {32, 64, 128}, T in {1024, 4096} and three window sets per T:
//   full      every head W = T (plain causal)
//   T/8       every head W = T/8
//   adaptive  [T/8, T/8, T/8, T/8, T/4, T/4, T/2, T] (the paper's Full-adaptive mix, rounded to 8 heads)
// Columns: ms (median of 7 runs at T = 1024, 5 at T = 4096, after a warmup; all configurations of a (T, D) are
// interleaved run by run), pair_ratio = visible pairs / visible pairs of "full",
// time_ratio = ms / ms of "full" (same T, D, path, pass), gflops and its share of an sgemm (1024^3, row-major)
// measured in this process, and for the tiled path its speedup over the dense path.
// FLOP counting (useful work, visible causal pairs only, whatever the path executes): forward 4 D per pair
// (QK^T and PV), backward 8 D per pair (dP = dO V^T, dV, dK, dQ; the recomputation of QK^T, 2 D more, is not
// counted), fwd+bwd 12 D per pair.
// The dense path at T = 4096 runs all window sets for D = 64 only (its cost does not depend on the windows);
// for D = 32 and 128 it runs the full set.
#include "bench/bench_attention.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_train.h"
#include "core/rng.h"
#include "core/sys.h"
#include "kernels/dispatch.h"

namespace aah {
namespace {


double attn_bench_median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct AttnBenchRow {
  int T, D;
  std::string window_set, path, pass;
  std::vector<int> windows;
  double ms, pair_ratio, time_ratio, gflops, pct_sgemm, speedup_vs_dense;  // speedup < 0: not measured
  uint64_t pairs;
};

}  // namespace

int bench_attention(bool json) {
  const int B = 1, H = 8;
  // The sgemm reference: the better of a measurement before and one after the attention runs, so that a burst of
  // other load on the machine during one of them does not inflate the percentages.
  double sgemm = bench_sgemm_gflops();
  std::vector<AttnBenchRow> rows;
  if (!json) std::printf("attention bench: B=%d H=%d, %d threads\n", B, H, num_threads());

  for (int T : {1024, 4096})
    for (int D : {32, 64, 128}) {
      const std::vector<std::pair<std::string, std::vector<int>>> sets = {
          {"full", std::vector<int>(H, T)},
          {"T/8", std::vector<int>(H, T / 8)},
          {"adaptive", {T / 8, T / 8, T / 8, T / 8, T / 4, T / 4, T / 2, T}}};
      const size_t nq = size_t(B) * H * T * D;
      Rng rng(uint64_t(T) * 131 + D);
      auto randn = [&](size_t n) {
        std::vector<float> x(n);
        for (auto& e : x) e = float(rng.normal());
        return x;
      };
      const auto q = randn(nq), k = randn(nq), v = randn(nq), dout = randn(nq);
      std::vector<float> dq(nq), dk(nq), dv(nq);
      // One run per (path, window set); the runs are interleaved rep by rep, so that slow drifts of the machine's
      // load hit every configuration alike and the time ratios stay meaningful.
      struct Run {
        int path, set;
        std::vector<float> out, lse;
        std::vector<double> tf, tb;
      };
      std::vector<Run> runs;
      for (int path = 0; path < 2; path++)
        for (int si = 0; si < (int)sets.size(); si++) {
          if (path == 1 && T >= 4096 && si > 0 && D != 64) continue;  // dense cost is window-independent
          runs.push_back({path, si, std::vector<float>(nq), std::vector<float>(size_t(B) * H * T), {}, {}});
        }
      const AttnImpl impl_of[2] = {AttnImpl::local, AttnImpl::dense};  // path 0 "tiled", 1 "dense"
      auto fwd = [&](Run& r) {
        const int* win = sets[r.set].second.data();
        const double t0 = now_seconds();
        attention_forward(impl_of[r.path], r.out.data(), r.lse.data(), q.data(), k.data(), v.data(), win, B, H, H,
                          T, D, nullptr, nullptr);
        return now_seconds() - t0;
      };
      auto bwd = [&](Run& r) {
        const int* win = sets[r.set].second.data();
        const double t0 = now_seconds();
        attention_backward(impl_of[r.path], dq.data(), dk.data(), dv.data(), dout.data(), r.out.data(), r.lse.data(),
                           q.data(), k.data(), v.data(), win, B, H, H, T, D, nullptr);
        return now_seconds() - t0;
      };
      const int reps = T >= 4096 ? 5 : 7;
      for (auto& r : runs) fwd(r), bwd(r);  // warmup
      for (int rep = 0; rep < reps; rep++)
        for (auto& r : runs) r.tf.push_back(fwd(r)), r.tb.push_back(bwd(r));

      const uint64_t full_pairs = uint64_t(B) * H * attn_visible_pairs(T, T);
      double full_ms[2][3] = {};  // [path][pass]
      const size_t first = rows.size();
      for (auto& r : runs) {
        const auto& [name, win] = sets[r.set];
        uint64_t pairs = 0;
        for (int w : win) pairs += uint64_t(B) * attn_visible_pairs(T, w);
        const double tf = attn_bench_median(r.tf), tb = attn_bench_median(r.tb);
        const double secs[3] = {tf, tb, tf + tb};
        const double flops[3] = {4.0 * pairs * D, 8.0 * pairs * D, 12.0 * pairs * D};
        const char* passes[3] = {"fwd", "bwd", "fwd+bwd"};
        for (int p = 0; p < 3; p++) {
          if (r.set == 0) full_ms[r.path][p] = secs[p] * 1e3;
          AttnBenchRow row;
          row.T = T, row.D = D, row.window_set = name, row.path = r.path == 0 ? "tiled" : "dense";
          row.pass = passes[p];
          row.windows = win;
          row.ms = secs[p] * 1e3;
          row.pairs = pairs;
          row.pair_ratio = double(pairs) / full_pairs;
          row.time_ratio = row.ms / full_ms[r.path][p];
          row.gflops = flops[p] / secs[p] / 1e9;
          row.speedup_vs_dense = -1.0;
          rows.push_back(row);
        }
      }
      for (size_t i = first; i < rows.size(); i++)  // the tiled rows' speedup over the dense run of the same set
        for (size_t j = first; j < rows.size(); j++)
          if (rows[i].path == "tiled" && rows[j].path == "dense" && rows[i].window_set == rows[j].window_set &&
              rows[i].pass == rows[j].pass)
            rows[i].speedup_vs_dense = rows[j].ms / rows[i].ms;
    }
  sgemm = std::max(sgemm, bench_sgemm_gflops());
  for (auto& r : rows) r.pct_sgemm = 100.0 * r.gflops / sgemm;
  if (!json) std::printf("sgemm 1024^3 in this process: %.1f GFLOP/s\n", sgemm);

  if (json) {
    for (const auto& r : rows) {
      nlohmann::json j = {{"bench", "attention"}, {"B", B},
                          {"H", H},
                          {"T", r.T},
                          {"D", r.D},
                          {"window_set", r.window_set},
                          {"windows", r.windows},
                          {"path", r.path},
                          {"pass", r.pass},
                          {"ms", r.ms},
                          {"pairs", r.pairs},
                          {"pair_ratio", r.pair_ratio},
                          {"time_ratio", r.time_ratio},
                          {"time_over_pair_ratio", r.time_ratio / r.pair_ratio},
                          {"gflops", r.gflops},
                          {"sgemm_gflops", sgemm},
                          {"pct_sgemm", r.pct_sgemm},
                          {"threads", num_threads()}};
      j["speedup_vs_dense"] = r.speedup_vs_dense > 0 ? nlohmann::json(r.speedup_vs_dense) : nlohmann::json(nullptr);
      std::printf("%s\n", j.dump().c_str());
    }
    return 0;
  }

  std::printf("%5s %4s %-9s %-6s %-8s %10s %7s %7s %7s %8s %7s %8s\n", "T", "D", "windows", "path", "pass", "ms",
              "pairs", "time", "t/p", "GFLOP/s", "%sgemm", "vs dense");
  for (const auto& r : rows) {
    char vs[16] = "";
    if (r.speedup_vs_dense > 0) std::snprintf(vs, sizeof vs, "%.2fx", r.speedup_vs_dense);
    std::printf("%5d %4d %-9s %-6s %-8s %10.2f %7.4f %7.4f %7.3f %8.1f %6.1f%% %8s\n", r.T, r.D,
                r.window_set.c_str(), r.path.c_str(), r.pass.c_str(), r.ms, r.pair_ratio, r.time_ratio,
                r.time_ratio / r.pair_ratio, r.gflops, r.pct_sgemm, vs);
  }
  // Goals at T = 4096 (tiled path): time ratio <= 1.15 x pair ratio; full fwd+bwd >= 35% of sgemm; >= 4x dense.
  std::printf("\nT=4096 goals (tiled): time_ratio/pair_ratio <= 1.15, full fwd+bwd >= 35%% sgemm, >= 4x dense\n");
  for (int D : {32, 64, 128}) {
    double worst = 0, pct = 0, speed = 0;
    for (const auto& r : rows) {
      if (r.T != 4096 || r.D != D || r.path != "tiled") continue;
      if (r.window_set != "full" && r.pass != "fwd+bwd") worst = std::max(worst, r.time_ratio / r.pair_ratio);
      if (r.window_set == "full" && r.pass == "fwd+bwd") pct = r.pct_sgemm, speed = r.speedup_vs_dense;
    }
    std::printf("  D=%-3d worst time/pair ratio %.3f   full fwd+bwd %.1f%% of sgemm   %.2fx the dense path\n", D,
                worst, pct, speed);
  }
  std::printf("FLOPs counted: fwd 4*pairs*D, bwd 8*pairs*D (visible causal pairs only). Dense at T=4096: all window"
              " sets for D=64, full only for D=32/128.\n");
  return 0;
}

}  // namespace aah
