// The need-aware window policy (spec section 10): the mass measurement and the decisions. See coverage.h.
#include "controller/coverage.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "kernels/attention_common.h"

namespace aah {

namespace {

constexpr int kQueryBlock = 64;  // query rows per score block: a (64, T) float block per thread

}  // namespace

double coverage_range_sum(const float* e, int lo, int hi) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int j = lo; j < hi; j++) s += double(e[j]);
  return s;
}

// e[j] *= scale for j < n; returns the largest. Eight independent lanes, so the compiler vectorizes it.
namespace {

// mass (K) of one (sequence, head): q (T, D), k (T, D), scores scratch (kQueryBlock, T), per_query scratch (K, T):
// every query's mass per window. The mean over all queries (tail >= 1), or over the ceil(tail T) of least mass.
void head_window_mass(const Backend<float>& be, double* mass, const float* q, const float* k, int T, int D,
                      const int* windows, int K, double tail, float* scores, std::vector<double>& per_query) {
  const float scale = 1.0f / std::sqrt(float(D));
  per_query.resize(size_t(K) * T);
  std::vector<double> covered(K);
  for (int i0 = 0; i0 < T; i0 += kQueryBlock) {
    const int i1 = std::min(T, i0 + kQueryBlock), nk = i1;  // keys 0 .. i1-1 cover every row of the block
    be.matmul_forward(scores, q + size_t(i0) * D, k, i1 - i0, D, nk);  // (i1 - i0, nk) = q_blk k^T
    for (int i = i0; i < i1; i++) {
      float* e = scores + size_t(i - i0) * nk;
      const int n = i + 1;  // causal: keys 0 .. i
      const float mx = be.scale_max(e, n, scale);
      be.exp_shifted_sum(e, e, mx, n);  // e_j = exp(s_j - max)
      // Bands of keys from the nearest outwards: window W_k holds keys n - W_k .. i. The total is the last
      // running sum, so a window holding every key has mass exactly 1.
      double run = 0;
      int lo_prev = n;
      for (int c = 0; c < K; c++) {
        const int lo = std::max(0, n - windows[c]);
        run += coverage_range_sum(e, lo, lo_prev);
        lo_prev = lo;
        covered[c] = run;
      }
      run += coverage_range_sum(e, 0, lo_prev);
      for (int c = 0; c < K; c++) per_query[size_t(c) * T + i] = covered[c] / run;
    }
  }
  const int n = tail >= 1 ? T : std::clamp(int(std::ceil(tail * T - 1e-9)), 1, T);  // ceil(tail T): 0.1 * 150 is 15
  for (int c = 0; c < K; c++) {
    double* m = per_query.data() + size_t(c) * T;
    if (n < T) {  // the n least, summed in ascending order: the same bits whatever nth_element left; all: query order
      std::nth_element(m, m + (n - 1), m + T);
      std::sort(m, m + n);
    }
    double s = 0;
    for (int i = 0; i < n; i++) s += m[i];
    mass[c] = s / double(n);
  }
}

}  // namespace

void coverage_window_mass(const Backend<float>& be, double* mass, const float* q, const float* k, int S, int H, int Hkv,
                          int T, int D, const int* windows, int K, double tail) {
  AAH_CHECK(S >= 0 && H >= 1 && Hkv >= 1 && H % Hkv == 0 && T >= 1 && D >= 1 && K >= 1 && tail > 0);
  const int group = H / Hkv, tasks = S * H;
  const size_t per_head = size_t(T) * D;
#pragma omp parallel if (tasks > 1)
  {
    std::vector<float> scores(size_t(std::min(T, kQueryBlock)) * T);
    std::vector<double> per_query;
    // Each (s, h) row is computed by one thread alone, the same way whichever thread: dynamic scheduling is safe.
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < tasks; t++) {
      const int s = t / H, h = t % H;
      head_window_mass(be, mass + size_t(t) * K, q + (size_t(s) * H + h) * per_head,
                       k + (size_t(s) * Hkv + h / group) * per_head, T, D, windows, K, tail, scores.data(), per_query);
    }
  }
}

void coverage_mass_mean(double* out, const double* per_seq, int S, int H, int K) {
  const size_t n = size_t(H) * K;
  for (size_t i = 0; i < n; i++) {
    double s = 0;
    for (int b = 0; b < S; b++) s += per_seq[size_t(b) * n + i];
    out[i] = S > 0 ? s / double(S) : 0.0;
  }
}

int coverage_choice(const double* mass, int K, double coverage) {
  for (int c = 0; c < K; c++)
    if (mass[c] >= coverage) return c;
  return K - 1;
}

std::vector<int> coverage_budget_choice(const double* mass, int H, const std::vector<int>& windows, double budget) {
  const int K = int(windows.size()), T = windows.back();
  std::vector<double> pairs(K);
  for (int c = 0; c < K; c++) pairs[c] = double(attn_visible_pairs(T, windows[c]));
  const double limit = budget * double(H) * double(attn_visible_pairs(T, T));
  std::vector<int> choice(H, 0);
  double used = double(H) * pairs[0];
  for (;;) {
    int best_h = -1, best_k = -1;
    double best_rate = 0, best_cost = 0;
    for (int h = 0; h < H; h++) {
      const double* m = mass + size_t(h) * K;
      for (int c = choice[h] + 1; c < K; c++) {
        const double gain = m[c] - m[choice[h]], cost = pairs[c] - pairs[choice[h]];
        if (!(gain > 0) || cost <= 0 || used + cost > limit) continue;
        const double rate = gain / cost;
        if (rate > best_rate) best_h = h, best_k = c, best_rate = rate, best_cost = cost;
      }
    }
    if (best_h < 0) break;
    choice[best_h] = best_k;
    used += best_cost;
  }
  return choice;
}

}  // namespace aah
