// The copy-use window policy ("copy", added here, not in the paper; issue 40): a head keeps a long window when it
// USES far context, measured as chance-corrected copy mass, not when its attention merely spreads far.
//
// Query i predicts y_i = x_{i+1}. Its copy set C_i holds the earlier positions j whose token continues that target:
// x_j = y_i (a copy of the token itself: a retrieval head reading a value), or x_j = x_i with x_{j+1} = y_i (an
// induction match: the previous occurrence of the current token, followed by the target). Beyond a window W (keys
// j <= i - W, which the head cannot see under W) the head puts copy mass M_i(W) = sum_{j beyond, j in C_i} p_ij,
// and by chance it would put P_i(W) |C_i beyond| / |beyond| there (its mass beyond W, P_i(W), spread evenly). The
// use beyond W is u_i(W) = M_i(W) - P_i(W) |C_i beyond| / |beyond|: about 1 for a query whose answer the head copies
// from beyond W, about 0 for diffuse heads, sink heads and heads whose far mass lands on unrelated tokens.
// p_i is the causal softmax at FULL window, as in coverage.h.
//
// Decisions (copy_budget_choice): one pair budget for the whole model, solved exactly over every head of every
// layer: minimise the evidence of use lost, sum over heads of E_h(W_h), subject to the exact pair ratio <= budget;
// among equal losses the fewest pairs. Evidence E_h(W) per update = max(use now, decay x E before) (see
// copy_evidence_update): it rises at once when use appears and falls only after use has stayed low.
//
// S sequences, H query heads, Hkv key/value heads, T positions, D head dim, K candidate windows W_0 < ... < W_{K-1}.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace aah {

// use (S, H, K): row (s, h) holds sum over the queries i < T - 1 of sequence s of u_i(W_k) (0 where W_k > i: nothing
// beyond). q (S, H, T, D), k (S, Hkv, T, D) as attention uses them; tokens (S, T). Threads split the (s, h) rows;
// the result does not depend on the thread count. per_query (S, H, T, K), when given: each query's own u_i(W_k) (0 for
// the last query and where nothing is beyond), the terms of use's sums (aah.copy_count=once reads them).
void copy_use(const Backend<float>& be, double* use, const float* q, const float* k, const int32_t* tokens, int S,
              int H, int Hkv, int T, int D, const int* windows, int K, float* per_query = nullptr);

// The other statistic of use (aah.use_statistic=output; issue 40, DuoAttention's criterion measured directly): for
// each (sequence s, head h) and candidate window W_k, change (S, H, K) = sum_i ||o_i(W_k) - o_i(full)||^2 /
// sum_i ||o_i(full)||^2 over the queries i of the sequence, o_i(W) the head's attention output at query i under
// window W (softmax over the W nearest keys, causal) on v (S, Hkv, T, D). 0 where W_k holds every key (W_{K-1} must be
// T). Threads split the (s, h) rows; the result does not depend on the thread count.
void output_change(const Backend<float>& be, double* change, const float* q, const float* k, const float* v, int S,
                   int H, int Hkv, int T, int D, const int* windows, int K);

// evidence (n) = max(use, decay * evidence), elementwise: peak-hold with exponential forgetting.
void copy_evidence_update(double* evidence, const double* use, int n, double decay);

// The whole model's windows: c (N) over N = L x H heads minimising sum_h max(0, loss[h][c_h]) subject to
// sum_h pairs(T, W_{c_h}) <= budget N pairs(T, T), T = W_{K-1}, exactly (dynamic programming over the counts of heads
// at each window: the cost depends on those counts alone); among equal losses the fewest pairs, then the lowest
// index order. loss (N, K); loss[h][K-1] is taken as 0 (nothing is beyond the full window). A budget below every
// head at W_0 gives every head W_0.
std::vector<int> copy_budget_choice(const double* loss, int N, const std::vector<int>& windows, double budget);

// aah.copy_count=once (issue 40): a query's copy counts once, kept when ANY head's window keeps it. Heads that copy
// the same thing (seen: all four layer-1 heads of a retrieval base) then need one long window between them, where
// the per-head sum makes each look half-needed and the budget keeps none of them long.
// The evidence is a set of query rows. Row r holds, for each of the model's N heads and candidate window W_k,
// b(r, h, k) = max(0, u_r(W_k)) of that head (copy use beyond W_k, copy_use's per_query; 0 at W_{K-1}), and a
// weight. A choice c (N) keeps kept(r) = max_h (b(r, h, 0) - b(r, h, c_h)) of the row's need, need(r) =
// max_h b(r, h, 0), and loses need(r) - kept(r); the loss of c is the weighted sum over the rows.
struct CopyRows {
  int N = 0, K = 0;
  std::vector<float> use;     // (R, N, K): b(r, h, k)
  std::vector<float> weight;  // (R)
  size_t size() const { return weight.size(); }
};

double copy_once_loss(const CopyRows& rows, const std::vector<int>& choice);

// The choice (N) of least copy_once_loss with sum_h pairs(T, W_{c_h}) <= budget N pairs(T, T), T = W_{K-1}. Not
// exact (the loss is not separable over heads): the better of `start` (give the per-head solver's choice; it must fit
// the budget) and `previous` (the choice in force, when it fits the budget; else a greedy fill from every head at W_0,
// the move of most loss saved per pair first), then exchange moves (one head's window changed, or one head down and
// another up) while one lowers the loss, or keeps it and saves pairs. Never worse than `start`. Deterministic: ties
// go to the lowest head and window.
std::vector<int> copy_once_choice(const CopyRows& rows, const std::vector<int>& windows, double budget,
                                  const std::vector<int>& start, const std::vector<int>& previous = {});

}  // namespace aah
