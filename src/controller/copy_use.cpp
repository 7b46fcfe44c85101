// The copy-use policy's measurement and decision. See copy_use.h.
#include "controller/copy_use.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "controller/coverage.h"
#include "core/check.h"
#include "kernels/attention_common.h"

namespace aah {

namespace {

constexpr int kQueryBlock = 64;  // query rows per score block, as in coverage.cpp

constexpr int kMaxWindows = 8;

// use (K) of one (sequence, head), see copy_use.h. scores: (kQueryBlock, T) scratch; prev (T) scratch.
void head_copy_use(const Backend<float>& be, double* use, float* per_query, const float* q, const float* k,
                   const int32_t* x, int T, int D, const int* windows, int K, float* scores, std::vector<int>& prev) {
  AAH_CHECK(K <= kMaxWindows, "[copy] at most ", kMaxWindows, " candidate windows, got ", K);
  const float scale = 1.0f / std::sqrt(float(D));
  std::fill(use, use + K, 0.0);
  if (per_query) std::fill(per_query, per_query + size_t(T) * K, 0.0f);
  // prev[j]: the last earlier position holding token x[j] (-1: none). A query's copy set is then two short chains
  // (the earlier occurrences of its target, and of its own token), not a pass over every key.
  prev.assign(size_t(T), -1);
  std::vector<int> last;  // per token id, its last position so far
  for (int j = 0; j < T; j++) {
    AAH_CHECK(x[j] >= 0, "[copy] token id ", x[j], " is negative");
    if (size_t(x[j]) >= last.size()) last.resize(size_t(x[j]) + 1, -1);
    prev[size_t(j)] = last[size_t(x[j])], last[size_t(x[j])] = j;
  }
  for (int i0 = 0; i0 < T - 1; i0 += kQueryBlock) {
    const int i1 = std::min(T - 1, i0 + kQueryBlock);
    be.matmul_forward(scores, q + size_t(i0) * D, k, i1 - i0, D, i1);  // (i1 - i0, i1) = q_blk k^T
    for (int i = i0; i < i1; i++) {
      float* e = scores + size_t(i - i0) * i1;
      const int n = i + 1;  // causal: keys 0 .. i
      if (n <= windows[0]) continue;  // every window holds every key: nothing beyond
      const double total = be.exp_shifted_sum(e, e, be.scale_max(e, n, scale), n);
      const int32_t y = x[i + 1], xi = x[i];
      // Copy mass and count beyond each window W_c (keys 0 .. n - W_c - 1): x_j = y, or x_j = x_i with
      // x_{j+1} = y (when x_i = y the second set is inside the first: each position counts once).
      double copy[kMaxWindows] = {}, count[kMaxWindows] = {};
      auto add = [&](int j) {
        for (int c = 0; c < K; c++)
          if (j < n - windows[c]) copy[c] += e[j], count[c] += 1;
      };
      for (int j = prev[size_t(i + 1)]; j >= 0; j = prev[size_t(j)]) add(j);  // j <= i
      if (xi != y)
        for (int j = prev[size_t(i)]; j >= 0; j = prev[size_t(j)])
          if (x[j + 1] == y) add(j);
      // All mass beyond each window, from 0 outwards to each window's edge (the largest window's first).
      double all = 0;
      int j = 0;
      for (int c = K - 1; c >= 0; c--) {
        const int beyond = n - windows[c];
        if (beyond <= 0) continue;
        all += coverage_range_sum(e, j, beyond);
        j = beyond;
        const double u = (copy[c] - all * count[c] / double(beyond)) / total;
        use[c] += u;
        if (per_query) per_query[size_t(i) * K + c] = float(u);
      }
    }
  }
}

// change (K) of one (sequence, head), see output_change in copy_use.h. scores: (kQueryBlock, T) scratch; acc (D)
// and out (K, D) scratch.
void head_output_change(const Backend<float>& be, double* change, const float* q, const float* k, const float* v, int T,
                        int D, const int* windows, int K, float* scores, double* acc, double* out) {
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<double> den(static_cast<size_t>(K)), diff(static_cast<size_t>(K), 0.0);
  double energy = 0;
  for (int i0 = 0; i0 < T; i0 += kQueryBlock) {
    const int i1 = std::min(T, i0 + kQueryBlock);
    be.matmul_forward(scores, q + size_t(i0) * D, k, i1 - i0, D, i1);  // (i1 - i0, i1) = q_blk k^T
    for (int i = i0; i < i1; i++) {
      float* e = scores + size_t(i - i0) * i1;
      const int n = i + 1;  // causal: keys 0 .. i
      be.exp_shifted_sum(e, e, be.scale_max(e, n, scale), n);
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

void output_change(const Backend<float>& be, double* change, const float* q, const float* k, const float* v, int S,
                   int H, int Hkv, int T, int D, const int* windows, int K) {
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
      head_output_change(be, change + size_t(t) * K, q + (size_t(s) * H + h) * per_head, k + kv, v + kv, T, D, windows,
                         K, scores.data(), acc.data(), out.data());
    }
  }
}

void copy_use(const Backend<float>& be, double* use, const float* q, const float* k, const int32_t* tokens, int S,
              int H, int Hkv, int T, int D, const int* windows, int K, float* per_query) {
  AAH_CHECK(S >= 0 && H >= 1 && Hkv >= 1 && H % Hkv == 0 && T >= 1 && D >= 1 && K >= 1);
  const int group = H / Hkv, tasks = S * H;
  const size_t per_head = size_t(T) * D;
#pragma omp parallel if (tasks > 1)
  {
    std::vector<float> scores(size_t(std::min(T, kQueryBlock)) * T);
    std::vector<int> prev;
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < tasks; t++) {
      const int s = t / H, h = t % H;
      head_copy_use(be, use + size_t(t) * K, per_query ? per_query + size_t(t) * T * K : nullptr,
                    q + (size_t(s) * H + h) * per_head, k + (size_t(s) * Hkv + h / group) * per_head,
                    tokens + size_t(s) * T, T, D, windows, K, scores.data(), prev);
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

namespace {

// The rows as the once-solver reads them: kept(r, h, k) = max(0, b(r, h, 0) - b(r, h, k)), k < K - 1, and b(r, h, 0)
// at K - 1 (every key in the window); need(r) = max_h b(r, h, 0).
struct OnceTable {
  int R, N, K;
  std::vector<double> kept, need, weight;
  std::vector<std::vector<int>> rows_of;  // per head, the rows where it keeps anything (b(r, h, 0) > 0): only these
                                          // can change when the head's window does (the rows are sparse: measured
                                          // 3.6 of 8 heads per row on a retrieval run)
  explicit OnceTable(const CopyRows& rows) : R(int(rows.size())), N(rows.N), K(rows.K), rows_of(size_t(N)) {
    AAH_CHECK(rows.use.size() == rows.size() * size_t(N) * K, "[copy] once rows: ", rows.use.size(), " values for ",
              rows.size(), " rows of ", N, " x ", K);
    kept.resize(rows.use.size()), need.assign(size_t(R), 0.0), weight.assign(rows.weight.begin(), rows.weight.end());
    for (int r = 0; r < R; r++)
      for (int h = 0; h < N; h++) {
        const float* b = rows.use.data() + (size_t(r) * N + h) * K;
        double* kp = kept.data() + (size_t(r) * N + h) * K;
        const double b0 = std::max(0.0f, b[0]);
        for (int k = 0; k < K; k++) kp[k] = k == K - 1 ? b0 : std::max(0.0, b0 - std::max(0.0f, b[k]));
        need[size_t(r)] = std::max(need[size_t(r)], b0);
        if (b0 > 0) rows_of[size_t(h)].push_back(r);
      }
  }
  double at(int r, int h, int k) const { return kept[(size_t(r) * N + h) * K + k]; }
};

// Per row, the three largest kept(r, h, c_h) over the heads (value, head), for the loss change of moving one or two
// heads without a pass over every head.
struct Top3 {
  double v[3];
  int h[3];
};

std::vector<Top3> top3_of(const OnceTable& t, const std::vector<int>& c) {
  std::vector<Top3> top(size_t(t.R));
  for (int r = 0; r < t.R; r++) {
    Top3 x{{-1, -1, -1}, {-1, -1, -1}};
    for (int h = 0; h < t.N; h++) {
      const double v = t.at(r, h, c[size_t(h)]);
      for (int s = 0; s < 3; s++)
        if (v > x.v[s]) {
          for (int u = 2; u > s; u--) x.v[u] = x.v[u - 1], x.h[u] = x.h[u - 1];
          x.v[s] = v, x.h[s] = h;
          break;
        }
    }
    top[size_t(r)] = x;
  }
  return top;
}

// The loss change when head a takes window ka and head b (b = -1: none) window kb. Only the rows where a or b keeps
// anything can change.
double once_delta(const OnceTable& t, const std::vector<Top3>& top, int a, int ka, int b, int kb) {
  double d = 0;
  auto row = [&](int r) {
    const Top3& x = top[size_t(r)];
    double rest = 0;  // the best kept among the heads that do not move
    for (int s = 0; s < 3; s++)
      if (x.h[s] >= 0 && x.h[s] != a && x.h[s] != b) {
        rest = x.v[s];
        break;
      }
    double now = std::max(rest, t.at(r, a, ka));
    if (b >= 0) now = std::max(now, t.at(r, b, kb));
    d -= t.weight[size_t(r)] * (now - std::max(0.0, x.v[0]));
  };
  for (const int r : t.rows_of[size_t(a)]) row(r);
  if (b >= 0)
    for (const int r : t.rows_of[size_t(b)])
      if (!(t.at(r, a, t.K - 1) > 0)) row(r);  // not a's row already
  return d;  // < 0: less lost
}

double once_loss(const OnceTable& t, const std::vector<int>& choice) {
  AAH_CHECK(int(choice.size()) == t.N, "[copy] once loss: ", choice.size(), " choices for ", t.N, " heads");
  double loss = 0;
  for (int r = 0; r < t.R; r++) {
    double kept = 0;
    for (int h = 0; h < t.N; h++) kept = std::max(kept, t.at(r, h, choice[size_t(h)]));
    loss += t.weight[size_t(r)] * (t.need[size_t(r)] - kept);
  }
  return loss;
}

}  // namespace

double copy_once_loss(const CopyRows& rows, const std::vector<int>& choice) { return once_loss(OnceTable(rows), choice); }

std::vector<int> copy_once_choice(const CopyRows& rows, const std::vector<int>& windows, double budget,
                                  const std::vector<int>& start, const std::vector<int>& previous) {
  const OnceTable t(rows);
  const int N = t.N, K = t.K, T = windows.back();
  AAH_CHECK(K == int(windows.size()) && int(start.size()) == N, "[copy] once solver: ", N, " heads, ", K,
            " windows, a start of ", start.size());
  std::vector<double> pairs(static_cast<size_t>(K));
  for (int k = 0; k < K; k++) pairs[size_t(k)] = double(attn_visible_pairs(T, windows[size_t(k)]));
  const double limit = budget * double(N) * pairs.back();
  auto spent = [&](const std::vector<int>& c) {
    double s = 0;
    for (int h = 0; h < N; h++) s += pairs[size_t(c[size_t(h)])];
    return s;
  };
  // Scale for "no change": losses below it are equal (float evidence summed in double).
  double total_need = 0;
  for (int r = 0; r < t.R; r++) total_need += t.weight[size_t(r)] * t.need[size_t(r)];
  const double eps = 1e-12 * std::max(1.0, total_need);

  // The second start: the previous choice when it fits the budget, else a greedy fill from every head at W_0 (the
  // move of most loss saved per extra pair that fits, while one saves any).
  const bool warm = int(previous.size()) == N && spent(previous) <= limit;
  std::vector<int> second = warm ? previous : std::vector<int>(size_t(N), 0);
  while (!warm) {
    const std::vector<Top3> top = top3_of(t, second);
    const double room = limit - spent(second);
    double best_ratio = 0;
    int best_h = -1, best_k = -1;
    for (int h = 0; h < N; h++)
      for (int k = second[size_t(h)] + 1; k < K; k++) {
        const double extra = pairs[size_t(k)] - pairs[size_t(second[size_t(h)])];
        if (extra > room) break;
        const double saved = -once_delta(t, top, h, k, -1, 0);
        if (saved > eps && saved / extra > best_ratio) best_ratio = saved / extra, best_h = h, best_k = k;
      }
    if (best_h < 0) break;
    second[size_t(best_h)] = best_k;
  }
  const double start_loss = once_loss(t, start), second_loss = once_loss(t, second);
  // At equal loss the choice in force stays (windows do not flip between equally good choices); the greedy fill
  // must beat the per-head choice.
  std::vector<int> c = warm ? (start_loss < second_loss - eps ? start : second)
                            : (second_loss < start_loss - eps ? second : start);

  // Exchange moves: one head to another window, or one head down and another up, within the budget; the move that
  // lowers the loss most (or, at equal loss, saves the most pairs) while any does.
  for (int iter = 0; iter < 4 * N * K; iter++) {
    const std::vector<Top3> top = top3_of(t, c);
    const double used = spent(c);
    double best_d = 0, best_p = 0;
    int ba = -1, bka = 0, bb = -1, bkb = 0;
    auto consider = [&](int a, int ka, int b, int kb) {
      double p = pairs[size_t(ka)] - pairs[size_t(c[size_t(a)])];
      if (b >= 0) p += pairs[size_t(kb)] - pairs[size_t(c[size_t(b)])];
      if (used + p > limit) return;
      const double d = once_delta(t, top, a, ka, b, kb);
      const bool better = d < best_d - eps || (std::fabs(d - best_d) <= eps && p < best_p);
      if (better && (d < -eps || (d <= eps && p < 0))) best_d = d, best_p = p, ba = a, bka = ka, bb = b, bkb = kb;
    };
    for (int a = 0; a < N; a++)
      for (int ka = 0; ka < K; ka++) {
        if (ka == c[size_t(a)]) continue;
        consider(a, ka, -1, 0);
        if (ka > c[size_t(a)]) continue;  // pairs: a goes down, b goes up
        for (int b = 0; b < N; b++)
          for (int kb = c[size_t(b)] + 1; b != a && kb < K; kb++) consider(a, ka, b, kb);
      }
    if (ba < 0) break;
    c[size_t(ba)] = bka;
    if (bb >= 0) c[size_t(bb)] = bkb;
  }
  return c;
}

}  // namespace aah
