// The copy-use policy's measurement and decision. See copy_use.h.
#include "controller/copy_use.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "controller/coverage.h"
#include "core/check.h"
#include "kernels/attention_common.h"
#include "kernels/cpu/vexp.h"
#include "kernels/ops.h"

namespace aah {

namespace {

constexpr int kQueryBlock = 64;  // query rows per score block, as in coverage.cpp

// use (K) of one (sequence, head), see copy_use.h. scores: (kQueryBlock, T) scratch.
void head_copy_use(double* use, const float* q, const float* k, const int32_t* x, int T, int D, const int* windows,
                   int K, float* scores) {
  const float scale = 1.0f / std::sqrt(float(D));
  std::fill(use, use + K, 0.0);
  for (int i0 = 0; i0 < T - 1; i0 += kQueryBlock) {
    const int i1 = std::min(T - 1, i0 + kQueryBlock);
    cpu::matmul_forward(scores, q + size_t(i0) * D, k, i1 - i0, D, i1);  // (i1 - i0, i1) = q_blk k^T
    for (int i = i0; i < i1; i++) {
      float* e = scores + size_t(i - i0) * i1;
      const int n = i + 1;  // causal: keys 0 .. i
      if (n <= windows[0]) continue;  // every window holds every key: nothing beyond
      const double total = cpu::vexp_shifted_sum(e, e, coverage_scale_and_max(e, n, scale), n);
      const int32_t y = x[i + 1], xi = x[i];
      // Keys from 0 outwards to each window's edge, the largest window's (nearest to 0) first; keys 0 .. i - W_c
      // lie beyond W_c. Running sums: all mass, copy mass, copy count.
      double all = 0, copy = 0, count = 0;
      int j = 0;
      for (int c = K - 1; c >= 0; c--) {
        const int beyond = n - windows[c];
        if (beyond <= 0) continue;
        for (; j < beyond; j++) {
          const bool in_copy_set = x[j] == y || (x[j] == xi && x[j + 1] == y);  // j + 1 <= i here
          all += e[j];
          if (in_copy_set) copy += e[j], count += 1;
        }
        use[c] += (copy - all * count / double(beyond)) / total;
      }
    }
  }
}

// change (K) of one (sequence, head), see output_change in copy_use.h. scores: (kQueryBlock, T) scratch; acc (D)
// and out (K, D) scratch.
void head_output_change(double* change, const float* q, const float* k, const float* v, int T, int D,
                        const int* windows, int K, float* scores, double* acc, double* out) {
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<double> den(static_cast<size_t>(K)), diff(static_cast<size_t>(K), 0.0);
  double energy = 0;
  for (int i0 = 0; i0 < T; i0 += kQueryBlock) {
    const int i1 = std::min(T, i0 + kQueryBlock);
    cpu::matmul_forward(scores, q + size_t(i0) * D, k, i1 - i0, D, i1);  // (i1 - i0, i1) = q_blk k^T
    for (int i = i0; i < i1; i++) {
      float* e = scores + size_t(i - i0) * i1;
      const int n = i + 1;  // causal: keys 0 .. i
      cpu::vexp_shifted_sum(e, e, coverage_scale_and_max(e, n, scale), n);
      // Keys from i inwards; after the W_c nearest (keys i - W_c + 1 .. i), the running sums are window W_c's.
      std::fill(acc, acc + D, 0.0);
      double sum = 0;
      int j = i, c = 0;
      for (; c < K; c++) {
        const int lo = std::max(0, n - windows[c]);
        for (; j >= lo; j--) {
          sum += e[j];
          for (int d = 0; d < D; d++) acc[d] += double(e[j]) * v[size_t(j) * D + d];
        }
        den[size_t(c)] = sum;
        std::copy(acc, acc + D, out + size_t(c) * D);
      }
      const double* full = out + size_t(K - 1) * D;  // W_{K-1} = T: every key
      for (int d = 0; d < D; d++) energy += (full[d] / sum) * (full[d] / sum);
      for (int c2 = 0; c2 + 1 < K; c2++) {
        if (n <= windows[c2]) continue;  // the window holds every key: no change
        for (int d = 0; d < D; d++) {
          const double x = out[size_t(c2) * D + d] / den[size_t(c2)] - full[d] / sum;
          diff[size_t(c2)] += x * x;
        }
      }
    }
  }
  for (int c = 0; c < K; c++) change[c] = energy > 0 ? diff[size_t(c)] / energy : 0.0;
}

}  // namespace

void output_change(double* change, const float* q, const float* k, const float* v, int S, int H, int Hkv, int T,
                   int D, const int* windows, int K) {
  AAH_CHECK(S >= 0 && H >= 1 && Hkv >= 1 && H % Hkv == 0 && T >= 1 && D >= 1 && K >= 1);
  AAH_CHECK(windows[K - 1] >= T, "[copy] output_change: the last candidate window must be the full context");
  const int group = H / Hkv, tasks = S * H;
  const size_t per_head = size_t(T) * D;
#pragma omp parallel if (tasks > 1)
  {
    std::vector<float> scores(size_t(std::min(T, kQueryBlock)) * T);
    std::vector<double> acc(static_cast<size_t>(D)), out(static_cast<size_t>(K) * D);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < tasks; t++) {
      const int s = t / H, h = t % H;
      const size_t kv = (size_t(s) * Hkv + h / group) * per_head;
      head_output_change(change + size_t(t) * K, q + (size_t(s) * H + h) * per_head, k + kv, v + kv, T, D, windows,
                         K, scores.data(), acc.data(), out.data());
    }
  }
}

void copy_use(double* use, const float* q, const float* k, const int32_t* tokens, int S, int H, int Hkv, int T, int D,
              const int* windows, int K) {
  AAH_CHECK(S >= 0 && H >= 1 && Hkv >= 1 && H % Hkv == 0 && T >= 1 && D >= 1 && K >= 1);
  const int group = H / Hkv, tasks = S * H;
  const size_t per_head = size_t(T) * D;
#pragma omp parallel if (tasks > 1)
  {
    std::vector<float> scores(size_t(std::min(T, kQueryBlock)) * T);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < tasks; t++) {
      const int s = t / H, h = t % H;
      head_copy_use(use + size_t(t) * K, q + (size_t(s) * H + h) * per_head,
                    k + (size_t(s) * Hkv + h / group) * per_head, tokens + size_t(s) * T, T, D, windows, K,
                    scores.data());
    }
  }
}

void copy_evidence_update(double* evidence, const double* use, int n, double decay) {
  for (int i = 0; i < n; i++) evidence[i] = std::max(use[i], decay * evidence[i]);
}

std::vector<int> copy_budget_choice(const double* loss, int N, const std::vector<int>& windows, double budget) {
  const int K = int(windows.size()), T = windows.back();
  AAH_CHECK(N >= 1 && K >= 1 && K <= 8 && N <= 4096, "[copy] budget solver: ", N, " heads, ", K, " windows");
  std::vector<double> pairs(K);
  for (int c = 0; c < K; c++) pairs[c] = double(attn_visible_pairs(T, windows[c]));
  const double limit = budget * double(N) * double(attn_visible_pairs(T, T));
  auto lost = [&](int h, int c) { return c == K - 1 ? 0.0 : std::max(0.0, loss[size_t(h) * K + c]); };
  // State after deciding heads 0 .. h-1: how many took each window (counts packed in base N + 1); the pairs spent
  // follow from the counts. Per state the least loss, and how it was reached (previous state, choice).
  struct Best {
    double loss;
    uint64_t prev;
    int choice;
  };
  std::vector<std::map<uint64_t, Best>> layer(N + 1);
  std::vector<uint64_t> radix(K, 1);
  for (int c = 1; c < K; c++) radix[c] = radix[c - 1] * uint64_t(N + 1);
  layer[0][0] = {0.0, 0, -1};
  for (int h = 0; h < N; h++)
    for (const auto& [state, b] : layer[h])
      for (int c = 0; c < K; c++) {
        const uint64_t next = state + radix[c];
        const double l = b.loss + lost(h, c);
        auto it = layer[h + 1].find(next);
        if (it == layer[h + 1].end() || l < it->second.loss) layer[h + 1][next] = {l, state, c};
      }
  auto cost = [&](uint64_t state) {
    double s = 0;
    for (int c = 0; c < K; c++) s += pairs[c] * double((state / radix[c]) % uint64_t(N + 1));
    return s;
  };
  uint64_t best = 0;
  double best_loss = INFINITY, best_cost = INFINITY;
  for (const auto& [state, b] : layer[N]) {
    const double c = cost(state);
    if (c > limit && state != radix[0] * uint64_t(N)) continue;  // every head at W_0 is always allowed
    if (b.loss < best_loss || (b.loss == best_loss && c < best_cost)) best = state, best_loss = b.loss, best_cost = c;
  }
  std::vector<int> choice(N);
  for (int h = N; h > 0; h--) {
    const Best& b = layer[h].at(best);
    choice[h - 1] = b.choice;
    best = b.prev;
  }
  return choice;
}

}  // namespace aah
